"""The latency guard of a cutover: baseline before the fence, windows after it,
and an automatic rollback when the playbook's policy says the new primary is slower.

Slow-log windows are opened by steps of their own (journaled done, with an undo
that restores the server's settings), so a crash of the tool while a window is
open is repaired by `resume` (the window is reused or closed) or by `rollback`
(the undo restores long_query_time and slow_query_log).

Why the window on the candidate opens *before* the cutover: MariaDB and MySQL
copy long_query_time into each session when it connects, so the connections an
application opens right after the router flip are only logged if the window is
already open by then.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional, Protocol, runtime_checkable

from pydantic import Field

from dbmigrate.home import home
from dbmigrate.db.applier import Applier
from dbmigrate.db.readers.status import StatusReader
from dbmigrate.digest.model import Digest
from dbmigrate.digest.policy import GuardPolicy, evaluate
from dbmigrate.digest.window import HostFileReader
from dbmigrate.hosts import host_for, slow_log_source
from dbmigrate.db import slow_log_table
from dbmigrate.engine.state import TypedState
from dbmigrate.engine.step import FunctionStep, RunContext
from dbmigrate.procedures.kit.cutover import CutoverState
from dbmigrate.exceptions import DbmigrateError, Refused

if TYPE_CHECKING:
    from dbmigrate.config import Inventory
    from dbmigrate.db.connection import Server
    from dbmigrate.procedures.kit.switchover import SwitchoverServers
from dbmigrate.digest import sequential
from dbmigrate.digest import window as capture


class GuardState(TypedState):
    """Slow-log windows (the settings to restore), the baseline digest and the guard's decisions."""

    KEY = "guard"
    FLAT_KEYS = {"baseline_window": "baseline_window", "guard_window": "guard_window",
                 "baseline_digest": "baseline_digest", "guard_decisions": "guard_decisions",
                 "guard_tripped": "guard_tripped", "baseline_log": "baseline_log", "guard_blind": "guard_blind"}

    baseline_window: Optional[dict[str, Any]] = None  # saved server settings while a window is open
    guard_window: Optional[dict[str, Any]] = None
    baseline_digest: Optional[str] = None  # file of the baseline digest
    guard_decisions: list[dict[str, Any]] = Field(default_factory=list)
    guard_tripped: Optional[dict[str, Any]] = None
    baseline_log: Optional[str] = None  # the baseline's statements (local slow-log text) for the per-second test
    guard_blind: Optional[dict[str, Any]] = None  # why the guard could not judge, and what it did

    def window(self, key: WindowKey) -> dict[str, Any] | None:
        found: dict[str, Any] | None = getattr(self, key)
        return found


WindowKey = Literal["baseline_window", "guard_window"]

# Wire windows live in this process (a tcpdump on the host streaming to tshark here). A run
# resumed by another process finds none and opens them again; the host's tcpdump stops on its
# own at its time limit, so a crash leaves nothing running and nothing to restore.
_WIRE: dict[tuple[str, str], Any] = {}
WIRE_SLACK_S = 120.0


def _wire(ctx: RunContext[Any, CutoverRoles]) -> bool:
    policy = policy_of(ctx)
    return policy is not None and policy.window == "wire"


def _is_wire(saved: dict[str, Any] | None) -> bool:
    return saved is not None and saved.get("source") == "wire"


def _open_wire(ctx: RunContext[Any, CutoverRoles], role: str, key: WindowKey, seconds: float) -> str:
    from dbmigrate.digest.wire_window import WireWindow

    server = _server(ctx, role)
    window = WireWindow(server, host_for(ctx.resources.inventory, server.name), max_seconds=seconds + WIRE_SLACK_S)
    window.check()
    window.open()
    _WIRE[(ctx.run_id, key)] = window
    _save_window(ctx, key, {"source": "wire", "server": server.name, "address": server.address,
                            "opened_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    return f"wire window open on {server.name}: tcpdump of port {server.port} on its host, dissected by tshark"


def _take_wire(ctx: RunContext[Any, CutoverRoles], key: WindowKey, name: str) -> Path:
    """The statements the wire window saw since the last take, as a local slow-log file."""
    from dbmigrate.digest.wire_window import write_entries

    window = _WIRE.get((ctx.run_id, key))
    path = _digest_dir(ctx) / f"{name}.slow.log"
    with open(path, "w", encoding="utf-8") as f:
        write_entries(window.take() if window is not None else [], f)
    return path


def _save_window(ctx: RunContext[Any, CutoverRoles], key: WindowKey, saved: dict[str, Any]) -> None:
    with GuardState.edit(ctx.state) as s:
        setattr(s, key, saved)


class GuardTripped(DbmigrateError):
    """The latency guard decided to roll the cutover back."""


def _tool_users(ctx: RunContext[Any, CutoverRoles], role: str) -> list[str]:
    """The accounts the tool connects as: their sessions are never the application's."""
    return [_server(ctx, role).credentials.user]


def _app_entries(path: str | Path, tool_users: list[str]) -> list[sequential.Entry]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return sequential.applications(sequential.parse_slow_log(f), tool_users)


def act_blind(ctx: RunContext[Any, CutoverRoles], policy: GuardPolicy, why: str, when: str) -> str:
    """A guard that cannot judge says so and does what the policy's `blind` says, never a silent pass."""
    if policy.window == "wire":
        message = (f"the latency guard is blind {when}: {why}. The wire window saw too few of the "
                   f"application's statements (is the application running, on this server's port?)")
    else:
        message = (f"the latency guard is blind {when}: {why}. Sessions connected before the window opened, "
                   f"and sessions that set their own long_query_time, are not logged (window: wire sees them)")
    before = GuardState.load(ctx.state).guard_blind or {}
    # An operator who resumed past a blind pause before the cutover decided to go on without the
    # guard's judgement: the same blindness after the cutover is that decision again, not a new one.
    decided = (policy.blind == "pause" and when == "after the cutover"
               and before.get("when") == "before the cutover" and before.get("action") == "pause")
    action = "warn" if decided else policy.blind
    with GuardState.edit(ctx.state) as s:
        s.guard_blind = {"why": why, "when": when, "action": action, "at": ctx.clock.now(),
                         **({"decided_at_resume": True} if decided else {})}
    if decided:
        ctx.log(f"{message}; going on: the run was resumed past the same blindness before the cutover "
                f"(the operator's decision, recorded once)", "warning")
        return f"{message} (blind: pause, resumed before the cutover: not paused again)"
    if policy.blind == "warn":
        ctx.log(f"{message}; going on without its judgement (blind: warn)", "warning")
        return f"{message} (blind: warn)"
    if policy.blind == "pause":
        from dbmigrate.engine.runner import RunPaused

        raise RunPaused(f"{message} (blind: pause)",
                        hint=f"to go on without the guard's judgement: dbmigrate resume {ctx.run_id}; "
                             f"to undo: dbmigrate rollback {ctx.run_id}")
    if when == "before the cutover":
        raise Refused(f"{message} (blind: rollback): not cutting over without a guard",
                         hint="capture the application's traffic (reconnect its pool after the window opens, or "
                              "lengthen baseline_seconds), or set the guard's blind: warn to cut over without it")
    raise GuardTripped(f"{message} (blind: rollback)",
                       hint="the cutover is being rolled back through the reverse replication")


def policy_of(ctx: RunContext[Any, Any]) -> GuardPolicy | None:
    playbook = ctx.playbook
    spec = playbook.guard_section if playbook is not None else None
    if spec is None:
        return None
    try:
        return GuardPolicy.model_validate(spec.model_dump(exclude_none=True))
    except Exception as e:  # the playbook's guard section is validated here, at build time
        from pydantic import ValidationError

        if isinstance(e, ValidationError) and playbook is not None:
            from dbmigrate.yamlload import format_validation_error

            raise format_validation_error(playbook.path, e, lambda loc: playbook.line_of(("guard", *loc)),
                                          model=GuardPolicy) from None
        raise


def _digest_dir(ctx: RunContext[Any, CutoverRoles]) -> Path:
    d = home() / "digests" / ctx.run_id
    d.mkdir(parents=True, exist_ok=True)
    return d


@runtime_checkable
class CutoverRoles(Protocol):
    """What the guard reads of a procedure's resources: who was primary (old) and who is (new),
    their servers and the inventory that says how their hosts are reached."""

    @property
    def old(self) -> str: ...
    @property
    def new(self) -> str: ...
    @property
    def topology(self) -> SwitchoverServers: ...
    @property
    def inventory(self) -> Inventory: ...


def role_name(ctx: RunContext[Any, CutoverRoles], role: str) -> str:
    """The server playing `role` ("old" or "new") in the run's cutover."""
    roles = ctx.resources
    return roles.old if role == "old" else roles.new


def _reader(ctx: RunContext[Any, CutoverRoles], role: str) -> HostFileReader:
    """Reads a window's slow log through the server's host (local, ssh), as the inventory declares."""
    return HostFileReader(host_for(ctx.resources.inventory, role_name(ctx, role)))


def _server(ctx: RunContext[Any, CutoverRoles], role: str) -> Server:
    return ctx.resources.topology.servers[role_name(ctx, role)]


def _source(ctx: RunContext[Any, CutoverRoles], role: str) -> str:
    """file (read through the host) or table (mysql.slow_log over SQL), as the inventory declares."""
    return slow_log_source(ctx.resources.inventory, role_name(ctx, role))


def _take(ctx: RunContext[Any, CutoverRoles], role: str, saved: dict[str, Any], name: str, *, file: str | None = None,
          since: str | None = None, until: str | None = None) -> Path:
    """A window's statements as a local slow-log file: the file fetched through the host, or
    the table's rows in [since, until) on the server's clock."""
    if capture.is_table_window(saved):
        local, _ = capture.read_table_window(_server(ctx, role), since or saved["since"], until,
                                             _digest_dir(ctx) / f"{name}.slow.log")
        return local
    return _reader(ctx, role).fetch(file or saved["window_file"], _digest_dir(ctx))


# -- windows as steps --------------------------------------------------------------

def open_window_step(role: str, key: WindowKey, label: str) -> FunctionStep:
    """Open long_query_time=0 on the `role` server ("old" or "new"); saved settings go to the journal."""

    def is_open(ctx: RunContext[Any, CutoverRoles]) -> bool:
        saved = GuardState.load(ctx.state).window(key)
        if not saved or saved.get("restored"):
            return False
        if _is_wire(saved):
            window = _WIRE.get((ctx.run_id, key))
            return window is not None and window.alive()
        if capture.is_table_window(saved):
            return capture.table_window_is_open(_server(ctx, role))
        current = StatusReader(_server(ctx, role)).slow_query_log_file()
        return str(current).startswith(str(saved["window_file"]).removesuffix(".slow.log"))

    def run(ctx: RunContext[Any, CutoverRoles]) -> str:
        if ctx.dry_run:
            ctx.record_statement(role_name(ctx, role), "slow-log window: long_query_time=0, slow_query_log=ON, to a file of our own")
            return f"would open a slow-log window on {role_name(ctx, role)}"
        policy = policy_of(ctx)
        if policy is not None and policy.window == "wire":
            span = (getattr(ctx.params, "baseline_seconds", 10) if key == "baseline_window" else 0) + policy.window_s
            # The guard window opens before the cutover (warm-up, catch-up): its tcpdump outlives them, and
            # still ends on its own within the hour should the tool die.
            return _open_wire(ctx, role, key, span + 3600)
        server = _server(ctx, role)
        window = capture.SlowLogWindow(server, persist=lambda saved: _save_window(ctx, key, saved),
                                       source=_source(ctx, role))
        window.open()
        return f"slow-log window open on {server.name} ({label}): {window.log_file or 'mysql.slow_log'}"

    def undo(ctx: RunContext[Any, CutoverRoles]) -> str:
        return close_window(ctx, role, key)

    where = "old primary" if role == "old" else "candidate"
    # Slow-log settings, put back on any exit: a run refused after them has changed nothing.
    return FunctionStep(f"open {label} window on the {where}", run, check=is_open, undo=undo, observes_only=True)


def close_window(ctx: RunContext[Any, CutoverRoles], role: str, key: WindowKey) -> str:
    saved = GuardState.load(ctx.state).window(key)
    if not saved or saved.get("restored"):
        return "window already closed"
    if _is_wire(saved):
        window = _WIRE.get((ctx.run_id, key))
        if window is not None:
            window.close()
        if not ctx.dry_run:
            _save_window(ctx, key, {**saved, "restored": True})
        return f"wire window closed on {saved.get('server')} (nothing to restore)"
    if capture.is_table_window(saved) and not ctx.dry_run and not saved.get("until"):
        # Where the window ends on the server's clock, saved before the settings go back.
        saved = {**saved, "until": slow_log_table.server_now(_server(ctx, role))}
        _save_window(ctx, key, saved)
    changed = capture.restore(_server(ctx, role), saved, applier=Applier(_server(ctx, role), dry_run=ctx.dry_run))
    if not ctx.dry_run:
        _save_window(ctx, key, {**saved, "restored": True})
    return f"slow-log settings restored on {saved.get('server')} ({len(changed)} changed)"


def collect_baseline_step(seconds: float) -> FunctionStep:
    def run(ctx: RunContext[Any, CutoverRoles]) -> str:
        if ctx.dry_run:
            return f"would collect {seconds:g}s of baseline traffic on the old primary"
        saved = GuardState.load(ctx.state).baseline_window
        now = ctx.clock.now()
        opened = now if not saved else _iso_to_ts(saved.get("opened_at")) or now
        ctx.clock.sleep(max(0.0, seconds - (now - opened)))  # a resumed run waits only the rest
        wire = _is_wire(saved)
        close_window(ctx, "old", "baseline_window")  # a wire window: the tap stopped, every statement in
        saved = GuardState.load(ctx.state).baseline_window or saved
        out = _digest_dir(ctx) / "baseline.digest.json"
        if wire:
            local_log = _take_wire(ctx, "baseline_window", "baseline")
        else:
            assert saved is not None, "a slow-log baseline window was opened by the step before"
            local_log = _take(ctx, "old", saved, "baseline", until=saved.get("until"))
        digest = capture.digest_slow_log(local_log, out, duration_s=seconds,
                                         source={"kind": "baseline", "server": role_name(ctx, "old")})
        if not wire and saved is not None:
            capture.release_table_window(_server(ctx, "old"), saved)
        app = len(_app_entries(local_log, _tool_users(ctx, "old")))
        with GuardState.edit(ctx.state) as s:
            s.baseline_digest = str(out)
            s.baseline_log = str(local_log)
        ctx.metric("baseline_queries", digest.query_count)
        sentence = (f"baseline: {digest.query_count} queries in {len(digest.classes)} classes on "
                    f"{role_name(ctx, 'old')} ({app} of the application's)")
        policy = policy_of(ctx)
        if policy is not None and app < policy.min_samples:
            # Known before any fence: the guard would watch nothing. Said now, acted on by policy.
            return sentence + "; " + act_blind(
                ctx, policy, f"the baseline holds {app} of the application's queries, fewer than the policy's "
                             f"min_samples {policy.min_samples}", "before the cutover")
        return sentence

    return FunctionStep("collect baseline digest", run,
                        check=_baseline_collected,
                        undo=lambda c: close_window(c, "old", "baseline_window"), observes_only=True)


def _baseline_collected(ctx: RunContext[Any, CutoverRoles]) -> bool:
    digest = GuardState.load(ctx.state).baseline_digest
    return digest is not None and Path(digest).exists()


def _iso_to_ts(text: str | None) -> float | None:
    import datetime as dt

    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# -- the guard ---------------------------------------------------------------------

def guard_step(policy: GuardPolicy, sample_s: float) -> FunctionStep:
    """Watch the new primary for `policy.window_s`: each sample (every `sample_s`, the first at
    once) is judged as it arrives by the sequential test, which rolls back as soon as the
    evidence passes the policy; at the end the whole window is digested and judged too.
    A guard that judged nothing acts by the policy's `blind`."""

    def run(ctx: RunContext[Any, CutoverRoles]) -> str:
        if ctx.dry_run:
            return f"would watch {policy.window_s:g}s of traffic on the new primary against the baseline"
        state = GuardState.load(ctx.state)
        if not state.baseline_digest:
            raise DbmigrateError("no baseline digest was collected before the cutover",
                                 hint="resume the run: the 'collect baseline digest' step collects it")
        baseline = Digest.load(state.baseline_digest)
        server = _server(ctx, "new")
        saved = state.guard_window
        if not saved or saved.get("restored"):
            raise DbmigrateError("the guard's slow-log window on the new primary is not open",
                                 hint="resume the run: the 'open guard window' step reopens it")
        tool_users = _tool_users(ctx, "new")
        baseline_entries = (_app_entries(state.baseline_log, tool_users)
                            if state.baseline_log and Path(state.baseline_log).exists() else [])
        judge = sequential.SequentialGuard(policy, baseline_entries, baseline.duration_s or 1.0)
        table = capture.is_table_window(saved)
        wire = _is_wire(saved)
        base_file = str(saved.get("window_file") or "")
        since = saved.get("since")
        clock = ctx.clock
        started = clock.monotonic()
        whole = _digest_dir(ctx) / "guard.slow.log"
        decisions: list[dict[str, Any]] = []
        i = 0
        rotated = ""
        tripped: tuple[dict[str, Any], list[str]] | None = None
        # The first sample holds everything since the router flip: it weighs as that many seconds.
        switched_at = CutoverState.load(ctx.state).switched_at
        last = started - max(0.0, clock.now() - switched_at) if switched_at else started
        try:
            with open(whole, "w", encoding="utf-8") as whole_log:
                while True:
                    i += 1
                    if wire:
                        local_log = _take_wire(ctx, "guard_window", f"guard-{i}")
                    elif table:
                        # The table keeps growing: each sample is cut by the server's clock.
                        until = slow_log_table.server_now(server)
                        local_log = _take(ctx, "new", saved, f"guard-{i}", since=since, until=until)
                        since = until
                    else:
                        current = StatusReader(server).slow_query_log_file()
                        # Rotate: sessions keep long_query_time=0, new entries go to the next file.
                        rotated = f"{base_file.removesuffix('.slow.log')}.{i}.slow.log"
                        Applier(server).set_global("slow_query_log_file", rotated)
                        local_log = _take(ctx, "new", saved, f"guard-{i}", file=current)
                    now = clock.monotonic()
                    text = Path(local_log).read_text(encoding="utf-8", errors="replace")
                    Path(local_log).unlink(missing_ok=True)
                    whole_log.write(text)
                    entries = sequential.applications(sequential.parse_slow_log(text.splitlines()), tool_users)
                    second = judge.observe(entries, max(now - last, 0.001))
                    last = now
                    record = second.record(clock.now())
                    decisions.append(record)
                    with GuardState.edit(ctx.state) as s:
                        s.guard_decisions = decisions
                    ctx.metric("guard_window_queries", second.queries, window=str(i))
                    ctx.log(f"guard sample {i} ({second.queries} queries): "
                            f"{'; '.join(second.reasons) or 'within policy'}")
                    if second.rollback:
                        # Digested below first (what the samples so far held): the before/after
                        # comparison of a rolled-back cutover is what the operator reads next.
                        tripped = (record, second.reasons)
                        break
                    left = policy.window_s - (clock.monotonic() - started)
                    if left <= 0:
                        break
                    clock.sleep(min(sample_s, left))
                if wire and tripped is None:
                    # tshark may still be dissecting what the window caught (a busy machine): the tap
                    # is stopped, the rest dissected, and the whole window judged with it below.
                    close_window(ctx, "new", "guard_window")
                    rest = _take_wire(ctx, "guard_window", "guard-rest")
                    whole_log.write(Path(rest).read_text(encoding="utf-8", errors="replace"))
                    Path(rest).unlink(missing_ok=True)
        finally:
            close_window(ctx, "new", "guard_window")
            if not wire:
                capture.release_table_window(server, saved)
            if rotated:  # written after the last sample was read: the tool's own file, not needed
                host_for(ctx.resources.inventory, server.name).remove(rotated)
        # The whole window, judged as one (the report's before/after comparison comes from it).
        digest = capture.digest_slow_log(whole, _digest_dir(ctx) / "guard.digest.json",
                                         duration_s=clock.monotonic() - started,
                                         source={"kind": "guard", "server": server.name})
        whole.unlink(missing_ok=True)
        if tripped is not None:
            record, reasons = tripped
            with GuardState.edit(ctx.state) as s:
                s.guard_tripped = record
            raise GuardTripped("latency guard: " + "; ".join(reasons),
                               hint="the cutover is being rolled back through the reverse replication")
        decision = evaluate(policy, baseline, digest)
        record = {"window": "all", "queries": digest.query_count, "rollback": decision.rollback,
                  "insufficient": decision.insufficient, "reasons": decision.reasons, "numbers": decision.numbers,
                  "at": clock.now()}
        decisions.append(record)
        with GuardState.edit(ctx.state) as s:
            s.guard_decisions = decisions
        ctx.log(f"guard, the whole {policy.window_s:g}s: {'; '.join(decision.reasons) or 'within policy'}")
        if decision.rollback:
            with GuardState.edit(ctx.state) as s:
                s.guard_tripped = record
            raise GuardTripped("latency guard: " + "; ".join(decision.reasons),
                               hint="the cutover is being rolled back through the reverse replication")
        if judge.judged_seconds == 0 and decision.insufficient:
            why = judge.blind or (f"{digest.query_count} of the application's queries in {policy.window_s:g}s on "
                                  f"{server.name}; no sample and not the whole window could be judged")
            return act_blind(ctx, policy, why, "after the cutover")
        return (f"guard watched {policy.window_s:g}s on {server.name}: {judge.judged_seconds} of {judge.index} "
                f"sample(s) judged ({judge.judged_queries} queries), no regression past the policy")

    def accepted_blind(ctx: RunContext[Any, CutoverRoles]) -> bool:
        """A run paused because the guard was blind after the cutover: resuming it is the
        operator's decision to keep the cutover without the guard's judgement."""
        blind = GuardState.load(ctx.state).guard_blind
        return blind is not None and blind.get("when") == "after the cutover" and blind.get("action") == "pause"

    return FunctionStep("latency guard", run, check=accepted_blind,
                        undo=lambda c: close_window(c, "new", "guard_window"))


def guard_enabled(ctx: RunContext[Any, CutoverRoles]) -> bool:
    return policy_of(ctx) is not None
