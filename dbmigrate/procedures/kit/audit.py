"""What the old primary wrote after the fence, read from its binlog.

`read_only=ON` does not stop every session: accounts with SUPER or READ ONLY ADMIN (and
root) write on. When the old primary's binlog moved past the final position read at the
fence, the open asks its binlog what those transactions were (GTID, schema.table, rows, the
statement, the account where known), journals and reports them, and opens the candidate
only once it has applied every one of them. A candidate that does not have them within the
catch-up bound is not opened: the old primary stays fenced, the run undoes, and the
operator reads what was written.

Reading happens only when the position moved (rare), inside the fenced window, bounded by
probe_timeout_s; a binlog that cannot be read is said so, and the GTID check still decides.
"""

from __future__ import annotations

from typing import Any, Optional

from dbmigrate.db.binlog import BinlogReadError, BinlogTransaction
from dbmigrate.procedures.kit.preflight_checks import without_row
from dbmigrate.db.inspector import Session
from dbmigrate.engine.state import TypedState
from dbmigrate.engine.step import RunContext
from dbmigrate.exceptions import DbmigrateError, SafetyError
from dbmigrate.procedures.kit.switchover import Switchover


class PostFenceAudit(TypedState):
    """The audit's journaled facts: the old primary's transactions past its final position."""

    KEY = "post_fence_audit"

    fence_pos: Optional[str] = None
    sealed_pos: Optional[str] = None
    transactions: list[dict[str, Any]] = []
    read_error: Optional[str] = None
    candidate_has_them: Optional[bool] = None


def attribute(trx: list[BinlogTransaction], sealed: list[Session], bypass: set[str],
              since_fence_s: float | None = None) -> None:
    """Fill in each transaction's account where it is known: the session that wrote it (a
    Query event names it) among those the seal ended, else the one account among the sessions
    that could have written past the fence, else the accounts that could write past read_only.
    A session idle at the seal for longer than the fence had been asked for (`since_fence_s`)
    ran nothing past it: its seconds idle are whole, so it was idle at least that long."""
    by_id = {s.id: s.user for s in sealed}
    could = [s for s in sealed
             if (not bypass or s.user in bypass)
             and not (since_fence_s is not None and s.command == "Sleep" and s.time > since_fence_s)]
    users = sorted({s.user for s in could})
    for t in trx:
        if t.session_id is not None and t.session_id in by_id:
            t.account = by_id[t.session_id]
        elif len(users) == 1:
            t.account = f"{users[0]} (the one account with a session past read_only, ended at the seal)"
        elif bypass:
            t.account = f"one of {', '.join(sorted(bypass))} (accounts that bypass read_only)"


def writes_after_fence(sw: Switchover, ctx: RunContext[Any, Any], fence_pos: str, now: str, bypass: set[str],
                       since_fence_s: float | None = None) -> str:
    """The old primary logged past `fence_pos` (it is at `now`): report what, journal it, and
    require the candidate to have applied all of it before it opens."""
    audit = PostFenceAudit(fence_pos=fence_pos, sealed_pos=now)
    trx: list[BinlogTransaction] = []
    fmt = str(sw.insp(sw.old).variable("binlog_format") or "")
    try:
        if fmt.upper() != "ROW":
            # Statement-logged transactions carry no rows to name: the audit's detail needs ROW.
            # The candidate must still have applied all of them (the GTID wait below).
            raise BinlogReadError(without_row(fmt))
        trx = sw.topo.binlog(sw.old, sw.s.probe_timeout_s).after(fence_pos, sw.insp(sw.old).flavor.includes)
        attribute(trx, sw.sealed_sessions, bypass, since_fence_s)
    except BinlogReadError as e:
        audit.read_error = e.message
    audit.transactions = [t.to_dict() for t in trx]
    what = "; ".join(t.describe() for t in trx) if trx else f"not read ({audit.read_error})"
    ctx.log(f"{sw.old} logged {len(trx) or 'some'} transaction(s) after the fence, past its final position "
            f"{fence_pos or '(empty)'}: {what}", "warning")
    try:
        caught = sw.wait_catchup(now)
    except DbmigrateError as e:
        audit.candidate_has_them = False
        audit.save(ctx.state)
        raise SafetyError(f"{sw.old} logged transaction(s) after the fence that {sw.new} has not applied "
                          f"({e.message}): {what}; {sw.new} is not opened",
                          hint=f"{sw.old} stays fenced and the run undoes; decide whether to keep those writes "
                               f"(dbmigrate check shows them on any server that has them), and take away SUPER / "
                               f"READ ONLY ADMIN from accounts that must not write past the fence") from None
    audit.candidate_has_them = True
    audit.save(ctx.state)
    return (f"{sw.old} logged {len(trx) if trx else 'some'} transaction(s) after the fence ({what}); "
            f"{caught} (the old primary moved after the fence); ")
