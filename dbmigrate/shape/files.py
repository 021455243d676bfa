"""A shape directory as `shape capture` wrote it, read and checked before a rehearsal builds
anything: shape.json, digest.json (the query classes to replay) and, optionally, sessions.yaml
(session settings declared by hand where performance_schema could not show them:
`{account: {variable: value}}`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml

from dbmigrate.digest.model import Digest, QueryClass
from dbmigrate.exceptions import UsageError
from dbmigrate.shape.capture import FORMAT

_VARIABLE = re.compile(r"^[a-z_][a-z0-9_]*$")
# A pool's own connection set-up and transaction control: the replaying pool sends its own.
_NOT_REPLAYED = re.compile(r"^\s*(?:SET|USE|SHOW|BEGIN|START|COMMIT|ROLLBACK|ADMINISTRATOR|PING|QUIT)\b", re.IGNORECASE)


@dataclass
class ShapeFiles:
    path: Path
    shape: dict[str, Any]
    classes: list[QueryClass]
    duration_s: float
    sessions: dict[str, dict[str, str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # classes not replayed (connection set-up)

    @property
    def schemas(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.shape["schemas"])  # JSON; read_shape checked it is an object

    @property
    def accounts(self) -> list[dict[str, Any]]:
        return self.shape.get("accounts") or []

    @property
    def roles(self) -> list[dict[str, Any]]:
        return self.shape.get("roles") or []

    def rate(self, qc: QueryClass) -> float:
        return qc.count / self.duration_s

    def sessions_source(self) -> str:
        captured = (self.shape.get("sessions") or {}).get("available")
        declared = (self.path / "sessions.yaml").exists()
        return ", ".join(s for s, on in (("performance_schema at capture", captured),
                                         ("sessions.yaml", declared)) if on) or "none"


def read_shape(path: Path) -> ShapeFiles:
    """The shape at `path`, or a one-line error saying what is missing."""
    path = Path(path).expanduser()
    if not (path / "shape.json").is_file():
        raise UsageError(f"{path} holds no shape.json", hint="capture one: dbmigrate shape capture -i INV -c C -o DIR")
    try:
        shape = json.loads((path / "shape.json").read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"{path / 'shape.json'}: not readable JSON ({e})") from None
    if not isinstance(shape, dict) or shape.get("format") != FORMAT or not isinstance(shape.get("schemas"), dict):
        raise UsageError(f"{path / 'shape.json'}: not a shape written by `dbmigrate shape capture` ({FORMAT})")
    if not shape["schemas"]:
        raise UsageError(f"{path / 'shape.json'}: the shape holds no schema")
    digest_file = path / (shape.get("digest") or "digest.json")
    if not digest_file.is_file():
        raise UsageError(f"{path} holds no digest.json: there is no query class to replay",
                         hint="capture again with --seconds N so that the application's queries are digested")
    digest = Digest.load(digest_file)
    classes = [c for c in digest.classes if c.example and c.count > 0 and not _NOT_REPLAYED.match(c.example)]
    skipped = [c.label for c in digest.classes if c not in classes]
    if not classes or not digest.duration_s:
        raise UsageError(f"{digest_file}: no query class with a sample statement and a known window length",
                         hint="capture again with --seconds N while the application runs")
    files = ShapeFiles(path, shape, classes, float(digest.duration_s), skipped=skipped)
    captured = (shape.get("sessions") or {}).get("by_account") or {}
    files.sessions = {str(a): {str(k): str(v) for k, v in vs.items()} for a, vs in captured.items()}
    declared = path / "sessions.yaml"
    if declared.exists():
        doc = yaml.safe_load(declared.read_text()) or {}
        if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
            raise UsageError(f"{declared}: expected {{account: {{variable: value}}}}")
        for account, variables in doc.items():
            for name, value in variables.items():
                if not _VARIABLE.match(str(name).lower()):
                    raise UsageError(f"{declared}: {account}: {name!r} is not a session variable name")
                files.sessions.setdefault(str(account), {})[str(name).lower()] = str(value)
    return files
