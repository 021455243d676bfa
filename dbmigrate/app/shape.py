"""`shape capture` as a use case: the schema and accounts read from a replica when the cluster
has one (the primary is left alone), the query window taken where the application's queries go."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from dbmigrate.config import load_inventory
from dbmigrate.exceptions import UsageError
from dbmigrate.shape.capture import Shape, capture_shape, redact_literals, write_shape


def capture(inventory: Path, cluster: str, out: Path, *, schemas: list[str] | None = None, seconds: float = 0,
            server: str | None = None, literals: bool = False,
            progress: Callable[[str], None] | None = None) -> tuple[Shape, list[Path]]:
    inv = load_inventory(inventory)
    spec = inv.cluster(cluster)
    names = list(spec.servers)
    if not names:
        raise UsageError(f"cluster '{cluster}' has no server in {inventory}")
    primary = spec.primary_hint() or names[0]
    read_from = server or next((n for n in names if n != primary), primary)
    with inv.open(read_from) as srv:
        shape = capture_shape(srv, schemas, progress=progress)
    written = write_shape(shape, out)
    if seconds > 0:
        from dbmigrate.app.digests import capture as capture_digest
        from dbmigrate.digest.model import Digest

        digest_path = out / "digest.json"
        capture_digest(inventory, primary, seconds, digest_path, progress=progress)
        if not literals:
            d = Digest.load(digest_path)
            d.classes = [_redacted(c) for c in d.classes]
            d.save(digest_path)
        shape.digest = digest_path.name
        written = write_shape(shape, out) + [digest_path]
    return shape, written


def _redacted(qc):
    from dataclasses import replace

    return replace(qc, example=redact_literals(qc.example))
