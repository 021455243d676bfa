"""Without a `replay_digest`, the swap captures the readers' queries itself: a wire window
(digest/wire_window.py) on each side while it still serves reads, before it leaves the pool,
so that the side is tried with the application's own queries before it returns. The wire sees
prepared statements and sessions with their own long_query_time; nothing on the server changes.
"""

from __future__ import annotations

from pathlib import Path

from dbmigrate.digest.model import Digest
from dbmigrate.home import home
from dbmigrate.hosts import host_for
from dbmigrate.procedures.schema_swap.context import SwapContext


def enabled(ctx: SwapContext) -> bool:
    p = ctx.params
    return not p.replay_digest and p.replay_capture_s > 0


def digest_path(ctx: SwapContext, side: str) -> Path:
    return home() / "digests" / ctx.run_id / f"{side}.readers.digest.json"


def captured(ctx: SwapContext, side: str) -> bool:
    return digest_path(ctx, side).exists()


def capture_readers(ctx: SwapContext, side: str) -> str:
    from dbmigrate.digest.wire_window import capture_wire_window
    from dbmigrate.procedures.schema_swap.replay import hint_warnings

    p = ctx.params
    if ctx.dry_run:
        return f"would capture {p.replay_capture_s:g}s of the readers' queries on {side} (wire)"
    r = ctx.resources
    server = r.servers[side]
    got = capture_wire_window(server, host_for(r.inventory, side), p.replay_capture_s, digest_path(ctx, side),
                              clock=ctx.clock)
    found = hint_warnings(got.digest, p)
    for line in found:
        ctx.log(line, "warning")
    return (f"{side}: {got.digest.query_count} reader statement(s) in {len(got.digest.classes)} class(es) captured "
            f"on the wire ({got.source['prepared_executions']} prepared executions), to be tried on it before it "
            f"returns" + (f"; {len(found)} name a dropped index in a hint: " + "; ".join(found) if found else ""))


def readers_digest(ctx: SwapContext, side: str) -> Digest | None:
    """The side's captured classes; for a side that served none (the old primary), every side's."""
    if captured(ctx, side):
        return Digest.load(digest_path(ctx, side))
    others = sorted(digest_path(ctx, side).parent.glob("*.readers.digest.json"))
    if not others:
        return None
    merged = Digest.load(others[0])
    for path in others[1:]:
        more = Digest.load(path)
        seen = {c.checksum for c in merged.classes}
        merged.classes += [c for c in more.classes if c.checksum not in seen]
    return merged


def check_wire(ctx: SwapContext) -> tuple[bool, str]:
    """Preflight: each side's host lets the tool capture its port (before any change)."""
    from dbmigrate.tools.wire import WireUnavailable, check_available

    if not enabled(ctx):
        p = ctx.params
        return True, ("the replay digest is given" if p.replay_digest else
                      "replay_capture_s is 0: sides return without their readers' queries tried")
    r = ctx.resources
    bad = []
    for side in r.sides:
        try:
            check_available(host_for(r.inventory, side), r.servers[side].port)
        except WireUnavailable as e:
            bad.append(f"{side}: {e.message}")
    if bad:
        return False, ("the readers' queries cannot be captured on the wire: " + "; ".join(bad)
                       + " (give replay_digest, or set replay_capture_s: 0 to return sides untried)")
    return True, f"the readers' queries will be captured on the wire on {len(r.sides)} side(s)"
