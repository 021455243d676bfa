"""`shape capture` as a use case: the schema and accounts read from a replica when the cluster
has one (the primary is left alone), the query window taken where the application's queries go."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from dbmigrate.config import Inventory
    from dbmigrate.digest.model import Digest, QueryClass

from dbmigrate import priority
from dbmigrate.config import load_inventory
from dbmigrate.exceptions import UsageError
from dbmigrate.shape.capture import Shape, capture_shape, redact_literals, write_shape
from dbmigrate.shape.pacing import DEFAULT_SHARE, Pacer

NICE = 10  # the capture is never in a hurry: the cores go to the server and its application first


WINDOWS = ("auto", "wire", "performance_schema", "slow_log")


def capture(inventory: Path, cluster: str, out: Path, *, schemas: list[str] | None = None, seconds: float = 0,
            server: str | None = None, literals: bool = False, via: str = "auto", share: float = DEFAULT_SHARE,
            nice: int = NICE, sample: int = 1, allow_empty: bool = False,
            progress: Callable[[str], None] | None = None) -> tuple[Shape, list[Path]]:
    """The capture paced (its reads take at most `share` of the time) and at `nice` lower CPU
    priority, its digest and the programs it starts too; a slow-log window logs 1 in `sample`."""
    if via not in WINDOWS:
        raise UsageError(f"--window {via}: choose one of {', '.join(WINDOWS)}")
    if not 0 < share <= 1:
        raise UsageError(f"--share {share:g}: the capture's share of the time is more than 0 and at most 1",
                         hint="e.g. --share 0.05 (a read of 10 ms, then 190 ms of pause)")
    if not 0 <= nice <= 19:
        raise UsageError(f"--nice {nice}: a priority lowered by 0 to 19", hint="e.g. --nice 10")
    if sample < 1:
        raise UsageError(f"--sample {sample}: a slow-log window logs 1 statement in N, N >= 1", hint="e.g. --sample 10")
    with priority.yielding(nice):
        shape, written = _capture(inventory, cluster, out, schemas, seconds, server, literals, via, share, sample,
                                  progress)
    if seconds > 0 and shape.digest_classes == 0:
        message = (f"the query window captured 0 classes of the application ({shape.digest_source}): "
                   f"a rehearsal with this shape would replay nothing")
        if not allow_empty:
            from dbmigrate.exceptions import CommandFailed

            raise CommandFailed(1, message, hint="capture while the application runs, choose --window wire (it sees "
                                                 "prepared statements and sessions' own long_query_time), or pass "
                                                 "--allow-empty to keep a shape without queries")
        (progress or (lambda m: None))(f"warning: {message} (--allow-empty)")
    return shape, written


def _capture(inventory: Path, cluster: str, out: Path, schemas: list[str] | None, seconds: float, server: str | None,
             literals: bool, via: str, share: float, sample: int,
             progress: Callable[[str], None] | None) -> tuple[Shape, list[Path]]:
    inv = load_inventory(inventory)
    spec = inv.cluster(cluster)
    names = list(spec.servers)
    if not names:
        raise UsageError(f"cluster '{cluster}' has no server in {inventory}")
    primary = spec.primary_hint() or names[0]
    read_from = server or next((n for n in names if n != primary), primary)
    with inv.open(read_from) as srv:
        shape = capture_shape(srv, schemas, pacer=Pacer(share), progress=progress)
    if read_from != primary:
        # The applications' sessions and performance_schema's state are the primary's, where
        # they run and where the window is read: a replica's say nothing of them.
        from dbmigrate.db.shape_reader import ShapeReader

        with inv.open(primary) as srv:
            shape.sessions = ShapeReader(srv).session_overrides()
    written = write_shape(shape, out)
    if seconds > 0:
        from dbmigrate.digest.model import Digest

        digest_path = out / "digest.json"
        shape.digest_source = capture_window(inv, inventory, primary, seconds, digest_path, via, progress, sample)
        d = Digest.load(digest_path)
        if not literals:
            d.classes = [_redacted(c) for c in d.classes]
        if (d.source or {}).get("sampled_1_in", 1) > 1:
            d = _unsampled(d, int(d.source["sampled_1_in"]))
        d.save(digest_path)
        shape.digest = digest_path.name
        shape.digest_classes = len(d.classes)
        _add_wire_sessions(shape, d)
        written = write_shape(shape, out) + [digest_path]
    return shape, written


def _add_wire_sessions(shape: Shape, d: "Digest") -> None:
    """What each account's sessions SET on the wire (every new connection of a pool does): the
    settings the replay connects with."""
    from dbmigrate.db.shape_reader import SESSION_VARIABLES

    sets = (d.source or {}).get("session_sets") or {}
    by_account = dict(shape.sessions.get("by_account") or {})
    for user, values in sets.items():
        kept = {k: v for k, v in values.items() if k in SESSION_VARIABLES}
        if user and kept:
            by_account[user] = {**by_account.get(user, {}), **kept}
    if by_account != (shape.sessions.get("by_account") or {}):
        shape.sessions = {**shape.sessions, "available": True, "by_account": by_account,
                          "how": " + ".join(h for h in (shape.sessions.get("how"), "SET statements on the wire") if h)}
        shape.sessions.pop("why", None)


def _redacted(qc: QueryClass) -> QueryClass:
    from dataclasses import replace

    return replace(qc, example=redact_literals(qc.example))


def _unsampled(d: Digest, n: int) -> Digest:
    """A window that logged 1 statement in n: counts and total times scaled back by n, so that
    a rehearsal replays each class at the rate the primary served it (latencies as measured)."""
    from dataclasses import replace

    d.classes = [replace(c, count=c.count * n, total_time=c.total_time * n) for c in d.classes]
    d.query_count, d.total_time = d.query_count * n, d.total_time * n
    d.source = {**d.source, "counts_scaled_by": n}
    return d


def capture_window(inv: Inventory, inventory: Path, primary: str, seconds: float, digest_path: Path, via: str,
                   progress: Callable[[str], None] | None, sample: int = 1) -> str:
    """The query window on the primary: performance_schema's statement digests where it is on
    (they see sessions that set their own long_query_time), else a slow-log window (which does
    not see them until they reconnect). Returns which was used, in words."""
    from dbmigrate.db.statement_digest import StatementDigests

    say = progress or (lambda m: None)
    if via == "auto":
        from dbmigrate.app.digests import choose_window

        via, why = choose_window(inventory, primary)
        say(why)
    if via == "wire":
        from dbmigrate.app.digests import capture_wire

        got = capture_wire(inventory, primary, seconds, digest_path, progress=progress)
        s = got.source
        from dbmigrate.digest.wire_window import unseen_note

        return (f"wire (tcpdump of {primary}'s port, dissected by tshark: {s['statements']} statements, "
                f"{s['prepared_executions']} prepared executions, {s['sessions_before']} session(s) connected "
                f"before the window{unseen_note(s)})")
    with inv.open(primary) as srv:
        why_not = StatementDigests(srv).unavailable()
        if via == "performance_schema" and why_not:
            raise UsageError(f"--window performance_schema: not on {primary}: {why_not}",
                             hint="use --window slow_log, or start the server with performance_schema=ON")
        if via != "slow_log" and not why_not:
            from dbmigrate.digest.statement_window import capture_statement_window

            window = capture_statement_window(srv, seconds, digest_path, progress=progress)
            used = "performance_schema statement digests (sessions with their own long_query_time included)"
            if window.unseen_prepared:
                from dbmigrate.digest.statement_window import unseen_warning

                used += f"; {unseen_warning(window.unseen_prepared)}"
            if sample > 1:  # nothing is logged: every statement is counted, none sampled
                used += f"; --sample {sample} not applied (it samples a slow-log window)"
            return used
    from dbmigrate.app.digests import capture as capture_digest

    if via == "auto":
        say(f"performance_schema cannot be read on {primary} ({why_not}): a slow-log window instead, which does "
            f"not see sessions that set their own long_query_time until they reconnect")
    capture_digest(inventory, primary, seconds, digest_path, progress=progress, sample=sample)
    return ("slow-log window" + (f" sampled by log_slow_rate_limit={sample} (1 statement in {sample} logged, "
                                 f"counts scaled back by {sample})" if sample > 1 else "")
            + " (sessions that set their own long_query_time are not seen until they reconnect"
            + (f"; performance_schema: {why_not}" if why_not else "") + ")")
