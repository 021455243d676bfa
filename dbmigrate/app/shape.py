"""`shape capture` as a use case: the schema and accounts read from a replica when the cluster
has one (the primary is left alone), the query window taken where the application's queries go."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from dbmigrate.config import load_inventory
from dbmigrate.exceptions import UsageError
from dbmigrate.shape.capture import Shape, capture_shape, redact_literals, write_shape


WINDOWS = ("auto", "performance_schema", "slow_log")


def capture(inventory: Path, cluster: str, out: Path, *, schemas: list[str] | None = None, seconds: float = 0,
            server: str | None = None, literals: bool = False, via: str = "auto",
            progress: Callable[[str], None] | None = None) -> tuple[Shape, list[Path]]:
    if via not in WINDOWS:
        raise UsageError(f"--window {via}: choose one of {', '.join(WINDOWS)}")
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
        from dbmigrate.digest.model import Digest

        digest_path = out / "digest.json"
        shape.digest_source = capture_window(inv, inventory, primary, seconds, digest_path, via, progress)
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


def capture_window(inv, inventory: Path, primary: str, seconds: float, digest_path: Path, via: str,
                   progress: Callable[[str], None] | None) -> str:
    """The query window on the primary: performance_schema's statement digests where it is on
    (they see sessions that set their own long_query_time), else a slow-log window (which does
    not see them until they reconnect). Returns which was used, in words."""
    from dbmigrate.db.statement_digest import StatementDigests

    say = progress or (lambda m: None)
    with inv.open(primary) as srv:
        why_not = StatementDigests(srv).unavailable()
        if via == "performance_schema" and why_not:
            raise UsageError(f"--window performance_schema: not on {primary}: {why_not}",
                             hint="use --window slow_log, or start the server with performance_schema=ON")
        if via != "slow_log" and not why_not:
            from dbmigrate.digest.statement_window import capture_statement_window

            capture_statement_window(srv, seconds, digest_path, progress=progress)
            return "performance_schema statement digests (sessions with their own long_query_time included)"
    from dbmigrate.app.digests import capture as capture_digest

    if via == "auto":
        say(f"performance_schema cannot be read on {primary} ({why_not}): a slow-log window instead, which does "
            f"not see sessions that set their own long_query_time until they reconnect")
    capture_digest(inventory, primary, seconds, digest_path, progress=progress)
    return ("slow-log window (sessions that set their own long_query_time are not seen until they reconnect"
            + (f"; performance_schema: {why_not}" if why_not else "") + ")")
