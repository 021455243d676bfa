"""Runs as use cases: plan, start, resume, rollback, with the cluster lock and the resources.

UI-agnostic: callers pass event subscribers and an approver, so the CLI, the
TUI, rehearsals and benchmarks all drive runs the same way.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Iterator

from dbmigrate import faultpoint
from dbmigrate.db import connection
from dbmigrate.db.in_doubt import InDoubt
from dbmigrate.db.ledger import SafetyLedger, process_ledger
from dbmigrate.db.lease import SqlLease
from dbmigrate.db.named_lock import SqlNamedLocks
from dbmigrate.app.paths import check_journal
from dbmigrate.app.provisioning import install_provisioners
from dbmigrate.engine.events import Event, EventBus, Log, RunStarted, StepFinished, StepStarted, Subscriber
from dbmigrate.engine.journal import Journal, Run, current_holder, default_journal_path, new_run_id
from dbmigrate.engine.lease import Lease
from dbmigrate.engine.lock import ClusterLock, holder_alive
from dbmigrate.engine.runner import Approver, Runner, RunOutcome, explain
from dbmigrate.engine.step import AutoGate, ManualGate, Procedure, RunContext, RunState
from dbmigrate.app.errors import REFUSED
from dbmigrate.exceptions import CommandFailed, DbmigrateError, SafetyError, UsageError
from dbmigrate.playbook import Playbook, load_playbook
from dbmigrate.procedures.contract import Prepared

# What front ends read of a run: the procedure a plan shows (phases, steps, gates) and a run's outcome.
__all__ = ["AutoGate", "ManualGate", "PlaybookInfo", "Procedure", "RunOutcome", "SignalStop", "act_on_run",
           "describe_playbook", "explain", "list_runs", "mark_orphans", "plan_playbook", "resolve_journal_path",
           "resolve_run", "resume_run", "rollback_run", "run_detail", "start_run"]


def resolve_journal_path(explicit: Path | None = None, playbook: Playbook | None = None) -> Path:
    """--journal, then the playbook's `journal:`, then $DBMIGRATE_JOURNAL / $DBMIGRATE_HOME;
    checked, so that a directory or another program's file is refused in one line."""
    if explicit is not None:
        return check_journal(explicit)
    if playbook is not None and playbook.journal_path is not None:
        return check_journal(playbook.journal_path)
    return check_journal(default_journal_path())


def list_runs(journal_path: Path | None = None, limit: int = 20) -> list[dict[str, Any]]:
    """Recent runs, newest first; those whose process is gone are shown orphaned."""
    with Journal(resolve_journal_path(journal_path)) as journal:
        return mark_orphans(journal.list_runs(limit))


def run_detail(run_ref: str, journal_path: Path | None = None) -> dict[str, Any]:
    """One run: steps, gates, hooks and statements sent."""
    with Journal(resolve_journal_path(journal_path)) as journal:
        return journal.run_detail(journal.resolve_run_id(run_ref))


def resolve_run(run_ref: str, journal_path: Path | None = None) -> str:
    """The full id of a run named by a unique prefix or 'last'."""
    with Journal(resolve_journal_path(journal_path)) as journal:
        return journal.resolve_run_id(run_ref)


class Mode(Enum):
    """How a run is driven: a new run, a resume, a rollback, or a resume that completes a cutover
    whose old primary died after the fence."""

    RUN = "run"
    RESUME = "resume"
    ROLLBACK = "rollback"
    TAKEOVER = "takeover"


@dataclass(frozen=True)
class PlaybookInfo:
    """What a front end shows of a playbook before anything runs (validated on reading)."""

    path: Path
    procedure: str
    cluster: str
    inventory_path: Path | None
    journal_path: Path  # where its runs are journaled: --journal, its `journal:`, or the default


def describe_playbook(playbook_path: Path, journal_path: Path | None = None) -> PlaybookInfo:
    playbook = load_playbook(playbook_path)
    return PlaybookInfo(playbook.path, playbook.procedure, playbook.cluster, playbook.inventory_path,
                        resolve_journal_path(journal_path, playbook))


def plan_playbook(playbook_path: Path) -> Procedure:
    """Build the procedure of a playbook without touching any server; its inventory file and
    cluster are read and checked (a plan of a cluster that is not there is no plan)."""
    playbook = load_playbook(playbook_path)
    playbook.load_inventory()
    with Journal(":memory:") as scratch:
        ctx = RunContext[Any, Any](run_id="plan", procedure=playbook.procedure, cluster=playbook.cluster,
                         journal=scratch, bus=EventBus(), dry_run=True, params=playbook.params, playbook=playbook)
        return playbook.build(ctx)


def start_run(
    playbook_path: Path,
    *,
    params_update: dict[str, Any] | None = None,
    subscribers: Iterable[Subscriber] = (),
    approver: Approver | None = None,
    assume_yes: bool = False,
    dry_run: bool = False,
    journal_path: Path | None = None,
    cancel: threading.Event | None = None,
    rehearsal: bool = False,
) -> RunOutcome:
    """Start a new run of a playbook; a rehearsal's run is marked so (`last` never means it); `cancel`, once set, stops it before its next gate or step.
    `params_update` overrides the playbook's params for this run (nested dicts merge)."""
    playbook = load_playbook(playbook_path)
    if params_update:
        from pydantic import ValidationError

        try:
            playbook.params = type(playbook.params).model_validate(
                _merged(playbook.params.model_dump(), params_update))
        except ValidationError as e:
            first = e.errors()[0]
            raise UsageError(f"{playbook.path}: the {playbook.procedure} procedure does not take "
                             f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    with Journal(resolve_journal_path(journal_path, playbook)) as journal:
        if not (dry_run or playbook.spec.dry_run):
            dead = unfinished_run_of(journal, playbook.cluster)
            if dead is not None:
                take_over_or_refuse(dead, str(playbook.path.resolve()), playbook.sha256, bool(params_update))
                _announce(subscribers, dead.id, f"run {dead.id} of this playbook stopped mid-change (its process "
                                       f"{dead.pid} is gone): this command takes it over and resumes it, "
                                       f"settling what that process left in flight")
                return _drive(playbook, journal, dead.id, Mode.RESUME, subscribers, approver, assume_yes,
                              cancel=cancel)
        run_id = new_run_id()
        journal.create_run(
            run_id, procedure=playbook.procedure, cluster=playbook.cluster,
            params=playbook.params.model_dump(mode="json"), playbook=str(playbook.path.resolve()),
            playbook_sha=playbook.sha256, dry_run=dry_run or playbook.spec.dry_run,
        )
        if rehearsal:
            journal.mark_rehearsal(run_id)
        return _drive(playbook, journal, run_id, Mode.RUN, subscribers, approver, assume_yes, cancel=cancel)


def unfinished_run_of(journal: Journal, cluster: str) -> Run | None:
    """The cluster's run that stopped mid-change, if any: its process died (kill -9, power loss) with
    steps done or a statement on the wire, or its rollback failed. A new run never decides beside it:
    it would read a half-done topology without settling what the dead process sent."""
    for newest in journal.newest_runs(cluster, rehearsals=True):
        run = journal.get_run(newest["id"])
        if run is None or run.dry_run:
            continue
        began = bool(journal.completed_steps(run.id) or journal.unfinished_steps(run.id))
        if (process_gone(run) and began) or run.status == "rollback_failed":
            return run
    return None


def take_over_or_refuse(run: Run, playbook_path: str, playbook_sha: str, overridden: bool) -> None:
    """A new `run` of the very playbook a dead run ran (same file, same content, no overrides) takes
    that run over: the operator who runs the command again after a crash means "finish it", as with
    `resume`. Anything else (another playbook, an edited one, a failed rollback) is refused, naming
    the run and the commands that finish or undo it."""
    same = run.playbook == playbook_path and run.playbook_sha == playbook_sha and not overridden
    if same and run.status != "rollback_failed":
        return
    if run.status == "rollback_failed":
        why = "its rollback failed"
    else:
        why = f"its process {run.pid} is gone with steps done or in flight"
        if not same:
            why += ", and this is not the playbook it ran (or it was edited, or params are overridden)"
    raise CommandFailed(REFUSED, f"refused before any change: run {run.id} of cluster {run.cluster} "
                                 f"stopped mid-change ({why}); a new run would decide on a half-done cutover",
                        hint=f"finish it: dbmigrate resume {run.id}, or undo it: dbmigrate rollback {run.id}")


def _announce(subscribers: Iterable[Subscriber], run_id: str, message: str) -> None:
    for subscriber in subscribers:
        subscriber(Log(run_id=run_id, level="warning", message=message))


def _merged(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in update.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def act_on_run(run_ref: str, action: Callable[[RunContext[Any, Any]], str], *, subscribers: Iterable[Subscriber] = (),
               journal_path: Path | None = None) -> str:
    """Run one procedure-specific action (e.g. roll back one old server) in an existing run's
    context: its playbook, resources, journal and cluster lock. Returns the action's sentence."""
    with Journal(resolve_journal_path(journal_path)) as journal:
        run_id = journal.resolve_run_id(run_ref)
        run = journal.get_run(run_id)
        assert run is not None
        if not run.playbook:
            raise UsageError(f"run {run_id} has no playbook recorded")
        playbook = load_playbook(run.playbook)
        bus = EventBus()
        for subscriber in subscribers:
            bus.subscribe(subscriber)
        unsubscribe = bus.subscribe(journal.record, critical=True)
        install_provisioners(playbook.procedure)
        prepared = _prepare(playbook, RunState(journal, run_id))
        try:
            ctx = RunContext[Any, Any](run_id=run_id, procedure=playbook.procedure, cluster=playbook.cluster, journal=journal,
                             bus=bus, dry_run=False, resources=prepared.resources, params=playbook.params,
                             playbook=playbook)
            procedure = playbook.build(ctx)
            with _cluster_lock(procedure, prepared, playbook.cluster, journal, run_id), \
                    _decision(journal, run_id, playbook.cluster, bus, dry_run=False, servers=_servers(prepared)):
                sentence = action(ctx)
            ctx.log(sentence)
            return sentence
        finally:
            unsubscribe()
            _close(prepared)


# Given the candidates for `last` (newest first, each with cluster, procedure, status, age_s),
# the operator's choice: a run id, or None for none of them.
Chooser = Callable[[list[dict[str, Any]]], "str | None"]


def age_seconds(started_at: str, now: float | None = None) -> float:
    from datetime import datetime

    started = datetime.fromisoformat(started_at.replace("Z", "+00:00")).timestamp()
    return max(0.0, (time.time() if now is None else now) - started)


def pick_last(journal: Journal, cluster: str | None = None, choose: Chooser | None = None,
              *, rehearsals: bool = False) -> str:
    """What `last` means to resume and rollback: the newest run of the cluster named (or of the only
    cluster the journal has runs of); with runs of several clusters, the operator chooses. Rehearsal
    runs never match outside a rehearsal (give their id)."""
    candidates = journal.newest_runs(cluster, rehearsals=rehearsals)
    if not candidates:
        others = journal.newest_runs(None, rehearsals=rehearsals)
        if cluster is not None:
            raise UsageError(f"no run of cluster {cluster!r} in journal {journal.path}",
                             hint=("clusters with runs: " + ", ".join(r["cluster"] for r in others)) if others
                             else "list runs with: dbmigrate runs ls (rehearsal runs are named by their id)")
        raise UsageError(f"no run in journal {journal.path} that 'last' can mean",
                         hint="list runs with: dbmigrate runs ls (rehearsal runs are named by their id)")
    for c in candidates:
        c["age_s"] = age_seconds(c["started_at"])
    if len(candidates) == 1:
        return str(candidates[0]["id"])
    listed = "; ".join(f"{c['cluster']}: {c['procedure']} {c['id']} {c['status']}, {age_text(c['age_s'])} ago"
                       for c in candidates)
    picked = choose(candidates) if choose is not None else None
    if picked is None:  # nobody to ask, or no answer: nothing is done
        raise UsageError(f"'last' is ambiguous: the journal has runs of {len(candidates)} clusters ({listed})",
                         hint="name the cluster: --cluster NAME, or give the run id")
    return picked


def age_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def resume_run(run_ref: str, *, without_old_primary: bool = False, **kwargs: Any) -> RunOutcome:
    """Continue a run; `without_old_primary` completes a cutover whose old primary died after
    the fence (promote runs), once the facts show the candidate holds everything known."""
    return _continue_run(run_ref, Mode.TAKEOVER if without_old_primary else Mode.RESUME, **kwargs)


def rollback_run(run_ref: str, **kwargs: Any) -> RunOutcome:
    return _continue_run(run_ref, Mode.ROLLBACK, **kwargs)


def _continue_run(
    run_ref: str,
    mode: Mode,
    *,
    subscribers: Iterable[Subscriber] = (),
    approver: Approver | None = None,
    assume_yes: bool = False,
    journal_path: Path | None = None,
    cancel: threading.Event | None = None,
    cluster: str | None = None,
    choose: Chooser | None = None,
) -> RunOutcome:
    with Journal(resolve_journal_path(journal_path)) as journal:
        run_id = pick_last(journal, cluster, choose) if run_ref == "last" else journal.resolve_run_id(run_ref)
        run = journal.get_run(run_id)
        assert run is not None  # resolve_run_id found it
        if cluster is not None and run.cluster != cluster:
            raise UsageError(f"run {run_id} is a run of cluster {run.cluster!r}, not {cluster!r}",
                             hint="give the run id alone, or the cluster it ran on")
        if mode in (Mode.RESUME, Mode.TAKEOVER) and run.status == "rolled_back":
            raise UsageError(f"run {run_id} was rolled back; there is nothing to resume",
                             hint=f"start a new run: dbmigrate run {run.playbook}")
        if mode is Mode.TAKEOVER and run.status == "done":
            raise UsageError(f"run {run_id} is {run.status}: it has no cutover to complete",
                             hint=f"see: dbmigrate runs show {run_id}")
        if not run.playbook:
            raise UsageError(f"run {run_id} has no playbook recorded; it cannot be {mode.value}d from the command line")
        playbook = load_playbook(run.playbook)
        changed = playbook.sha256 != run.playbook_sha
        return _drive(playbook, journal, run_id, mode, subscribers, approver, assume_yes,
                      warn_changed=changed, cancel=cancel)


def _drive(
    playbook: Playbook,
    journal: Journal,
    run_id: str,
    mode: Mode,
    subscribers: Iterable[Subscriber],
    approver: Approver | None,
    assume_yes: bool,
    *,
    warn_changed: bool = False,
    cancel: threading.Event | None = None,
) -> RunOutcome:
    """Prepare resources, build, lock, and hand over to the runner (run, resume or rollback)."""
    run = journal.get_run(run_id)
    assert run is not None
    bus = EventBus()
    for subscriber in subscribers:
        bus.subscribe(subscriber)
    try:
        with _fault_injection(bus):
            return _drive_with_resources(playbook, journal, run, mode, bus, approver, assume_yes, warn_changed,
                                         cancel)
    except Exception as exc:
        # A fresh run that never reached the runner (no resources, lock refused,
        # bad gate) must not stay "running" in the journal. Resumed runs keep
        # their status: the lock may be refused because their process is alive.
        current = journal.get_run(run_id)
        if mode is not Mode.RUN or current is None or current.status != "running":
            raise
        if journal.step_rows(run_id):
            journal.finish_run(run_id, "failed", f"did not start: {explain(exc)}")
            raise
        if current.dry_run:
            journal.forget_run(run_id)  # a dry run that never started leaves no record
            raise
        if isinstance(exc, UsageError) or not isinstance(exc, DbmigrateError):
            journal.finish_run(run_id, "failed", f"did not start: {explain(exc)}")
            raise  # bad input stays exit 2; a bug shows its traceback
        # Nothing was sent to any server that changes it (a refused login, a lock held, a router
        # not there): the same exit as any refusal before a change.
        summary = f"refused before any change: {exc.message}"
        journal.finish_run(run_id, "refused", summary)
        raise CommandFailed(REFUSED, f"run {run_id} {summary}", exc.hint) from None


def _drive_with_resources(
    playbook: Playbook,
    journal: Journal,
    run: Run,
    mode: Mode,
    bus: EventBus,
    approver: Approver | None,
    assume_yes: bool,
    warn_changed: bool,
    cancel: threading.Event | None = None,
) -> RunOutcome:
    run_id = run.id
    install_provisioners(playbook.procedure)
    with _statements_in_doubt(journal, run_id):
        return _drive_prepared(playbook, journal, run, mode, bus, approver, assume_yes, warn_changed, cancel)


IN_DOUBT_KEY = "in_doubt"


@contextmanager
def _statements_in_doubt(journal: Journal, run_id: str, ledger: SafetyLedger | None = None) -> Iterator[None]:
    """Statements this run gave up on stay in doubt across processes: the journal keeps every
    unsettled one, and a resume or rollback settles them before deciding anything. Kept in
    `ledger` (the process's by default: every handle of the process must see them)."""
    in_doubt = (ledger or process_ledger()).in_doubt
    in_doubt.clear()
    in_doubt.load([InDoubt.from_dict(d) for d in journal.get_state(run_id, IN_DOUBT_KEY, []) or []])

    def keep(doubts: list[InDoubt]) -> None:
        journal.set_state(run_id, IN_DOUBT_KEY, [d.as_dict() for d in doubts])

    stop = in_doubt.add_listener(keep)
    try:
        yield
    finally:
        stop()
        in_doubt.clear()


class _JournalIntents:
    """The run's journal as the sink of write-ahead intents (db/intent.py)."""

    def __init__(self, journal: Journal, run_id: str, cluster: str) -> None:
        self.journal, self.run_id, self.cluster = journal, run_id, cluster

    def intent_sent(self, intent: dict[str, Any]) -> int:
        return self.journal.record_intent(self.run_id, self.cluster, intent)

    def intent_outcome(self, intent_id: int, outcome: str) -> None:
        self.journal.intent_outcome(intent_id, outcome)


# How long the bump of each of the cluster's servers may take when a process's decision begins; a
# server that does not answer then is bumped on its first statement instead.
EAGER_BUMP_S = 2.0


def _servers(prepared: Prepared) -> list[Any]:
    return list(prepared.lease_servers.servers.values()) if prepared.lease_servers is not None else []


@contextmanager
def _decision(journal: Journal, run_id: str, cluster: str, bus: EventBus, *, dry_run: bool,
              servers: Iterable[Any] = (), ledger: SafetyLedger | None = None) -> Iterator[None]:
    """What this process decides, it decides after every earlier one, once it holds the cluster
    lock (so that no process still alive is superseded):
    - changes of this cluster's runs journaled as sent and never answered (a process killed with
      them in flight) are in doubt: each server's is settled before it is read or changed;
    - every server is bumped to a new fencing generation before anything else is read of it (the
      cluster's servers at once, before the first step, so that the cost stays out of the steps;
      any other, or one that did not answer then, on its first statement), and every role change
      carries it (db/generation.py); the first undo of this process is a new decision;
    - every change is journaled before it is sent (db/intent.py).
    All three in `ledger`, armed here and disarmed after (the process's by default: every handle
    of the process keeps them)."""
    if dry_run:
        yield
        return
    ledger = ledger or process_ledger()
    generations, intents = ledger.generations, ledger.intents
    doubts = []
    for row in journal.open_intents(cluster):
        if row["session_id"] is None:
            continue
        d = InDoubt(server=row["server"], address=row["address"], session_id=int(row["session_id"]),
                    user=row["user"] or "", statement=row["statement"], at=float(row["sent_at"]))
        intents.in_doubt(int(row["id"]), d.address, d.session_id, d.statement)
        doubts.append(d)
    intents.arm(_JournalIntents(journal, run_id, cluster))
    ledger.in_doubt.load(doubts)

    undoing = False

    def on_event(event: Event) -> None:
        nonlocal undoing
        if isinstance(event, StepStarted) and event.action == "undo" and not undoing:
            undoing = True
            generations.new_decision()

    unsubscribe = bus.subscribe(on_event)
    generations.arm(run_id)
    try:
        for server in servers:
            try:
                with server.bounded(EAGER_BUMP_S):
                    generations.ensure(server)
            except DbmigrateError:
                pass  # unreachable, or a statement there still in doubt: bumped on its first statement
        yield
    finally:
        intents.disarm()
        generations.disarm()
        unsubscribe()


def _drive_prepared(
    playbook: Playbook,
    journal: Journal,
    run: Run,
    mode: Mode,
    bus: EventBus,
    approver: Approver | None,
    assume_yes: bool,
    warn_changed: bool,
    cancel: threading.Event | None = None,
) -> RunOutcome:
    run_id = run.id
    prepared = _prepare(playbook, RunState(journal, run_id), old_gone=(mode is Mode.TAKEOVER))
    try:
        ctx = RunContext[Any, Any](run_id=run_id, procedure=playbook.procedure, cluster=playbook.cluster, journal=journal,
                         bus=bus, dry_run=run.dry_run, resources=prepared.resources, params=playbook.params,
                         playbook=playbook)
        if warn_changed:
            warning = Log(run_id=run_id, level="warning",
                          message=f"playbook {playbook.path} changed since the run started; using the current one")
            bus.emit(warning)
            journal.record_log(warning)
        procedure = playbook.build(ctx)
        runner = Runner(approver=approver, assume_yes=assume_yes, hooks=playbook.hook_runner(), cancel=cancel)
        with _cluster_lock(procedure, prepared, playbook.cluster, journal, run_id, run.dry_run) as lock, \
                _decision(journal, run_id, playbook.cluster, bus, dry_run=run.dry_run,
                          servers=_servers(prepared)):
            runner.stop_check = getattr(lock, "stop_reason", None)
            if mode is Mode.ROLLBACK:
                return runner.rollback(procedure, ctx)
            return runner.run(procedure, ctx, resume=(mode in (Mode.RESUME, Mode.TAKEOVER)))
    finally:
        _close(prepared)


@contextmanager
def _fault_injection(bus: EventBus) -> Iterator[None]:
    """Off unless DBMIGRATE_FAULT_PAUSE is set (the fault matrix): pause at a named point."""
    try:
        pauser = faultpoint.from_environment()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if pauser is None:
        yield
        return
    unsubscribe = bus.subscribe(pauser.on_event)
    connection.add_statement_listener(pauser.on_sent)
    faultpoint.add_router_listener(pauser.on_sent)
    faultpoint.add_sending_listener(pauser.on_sending)
    try:
        yield
    finally:
        faultpoint.remove_sending_listener(pauser.on_sending)
        faultpoint.remove_router_listener(pauser.on_sent)
        connection.remove_statement_listener(pauser.on_sent)
        unsubscribe()


def _prepare(playbook: Playbook, state: RunState, old_gone: bool = False) -> Prepared:
    """Open the procedure's resources; the run state lets a resumed run use facts journaled
    before a crash (e.g. which server was primary)."""
    if old_gone and not playbook.entry.takeover:
        raise UsageError(f"a {playbook.procedure} run cannot be completed without its old primary",
                         hint="--without-old-primary completes promote runs")
    return playbook.entry.prepare_resources(playbook, state, old_gone=old_gone)


def _cluster_lock(procedure: Procedure, prepared: Prepared, cluster: str, journal: Journal,
                  run_id: str, dry_run: bool = False) -> ContextManager[Any]:
    if not procedure.needs_lock:
        return nullcontext()
    if prepared.lock_session is None:
        raise SafetyError(
            f"procedure '{procedure.name}' needs the cluster lock but its preparer opened no lock session",
            hint="the procedure's prepare_resources must open a dedicated session to the primary",
        )
    lease = None
    if prepared.lease_servers is not None and not dry_run:  # a dry-run writes nothing, not even a lease
        where = prepared.lease_servers
        lease = Lease(SqlLease(where.servers, where.primary), cluster, run_id, holder=current_holder(),
                      host=socket.gethostname(), pid=os.getpid())
    return ClusterLock(SqlNamedLocks(prepared.lock_session), cluster, journal, run_id, lease)


def _close(prepared: Prepared) -> None:
    """What the preparer opened, the run closes; closing the lock session frees GET_LOCK."""
    for value, exc in prepared.close():  # closing must not mask the run's outcome
        print(f"warning: closing {value!r} failed: {exc}", file=sys.stderr)


class SignalStop:
    """SIGINT and SIGTERM for a run in this process. The first one sets `cancel`: the running
    step finishes, then the run stops (a cutover is rolled back, a run that changed nothing
    just stops). The second one says what is running and what state it leaves, then raises
    KeyboardInterrupt inside that step: the journal marks it interrupted, with the commands
    to continue or undo. Use as a context manager around the run; it also subscribes to its
    events (`subscriber`) to know which step is running."""

    def __init__(self, say: Any, cancel: threading.Event | None = None, *, rollback: bool = False) -> None:
        self.say = say  # one line for the operator (stderr)
        self.rollback = rollback  # a rollback is not stopped between steps: half-way is no safe shape
        self.cancel = cancel or threading.Event()
        self.signals = 0
        self.run_id = ""
        self.step: tuple[str, str, float] | None = None  # (action, name, started monotonic)
        self._saved: dict[int, Any] = {}

    def subscriber(self, event: Event) -> None:
        self.run_id = event.run_id or self.run_id
        if isinstance(event, StepStarted):
            self.step = (event.action, event.name, time.monotonic())
        elif isinstance(event, (StepFinished, RunStarted)):
            self.step = None

    def _running(self) -> str:
        if self.step is None:
            return "between steps"
        action, name, since = self.step
        return f"{'undoing' if action == 'undo' else 'in'} step '{name}' (running {time.monotonic() - since:.1f}s)"

    def handle(self, signum: int, _frame: Any = None) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        run = self.run_id or "RUN"
        if self.signals == 1 and self.rollback:
            self.say(f"{name}: the rollback goes on ({self._running()}): stopping it half-way would leave the "
                     f"cluster between two shapes; send it again to interrupt it at once")
            return
        if self.signals == 1:
            self.cancel.set()
            self.say(f"{name}: stopping {self._running()}: it finishes, then the run stops and a cutover in "
                     f"progress is rolled back; send it again to stop at once")
            return
        self.say(f"{name} again: interrupting {self._running()} now; that step may be half done and the run is "
                 f"journaled as interrupted: undo with dbmigrate rollback {run} or continue with dbmigrate resume {run}")
        raise KeyboardInterrupt(f"{name} twice")

    def __enter__(self) -> "SignalStop":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self.handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved.clear()


def process_gone(run: Run | dict[str, Any]) -> bool:
    """Is a run journaled as running whose process is gone (SIGKILL, power loss)? Only a
    process on this machine can be checked; another machine's run is taken as alive."""
    status, holder, pid = ((run.status, run.holder, run.pid) if isinstance(run, Run)
                           else (run.get("status"), run.get("holder"), run.get("pid")))
    return status == "running" and holder_alive(holder, pid) is False


def mark_orphans(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs whose process is gone are shown `orphaned`, with the commands that finish them."""
    for run in runs:
        if process_gone(run):
            run["status"] = "orphaned"
            run["summary"] = (f"its process {run['pid']} is gone; continue: dbmigrate resume {run['id']}, "
                              f"or undo: dbmigrate rollback {run['id']}")
    return runs
