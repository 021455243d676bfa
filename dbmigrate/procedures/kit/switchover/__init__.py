"""The mechanics of a planned switchover, one method per step, each idempotent.

`Switchover(old, new)` moves the writer from `old` to `new`. The promote
and schema swap procedures wrap these methods as engine steps; rollback is the same mechanics
pointed the other way (`switch_back`), so going back is a switchover, not a
restore.

Order matters for the write gap (measured on loopback, see docs/internals/fenced-window.md):
read_only on the old primary, wait for the candidate to apply the old
primary's final GTID position, flip the router (the candidate is still
read-only: the application reconnects while it opens), read_only=OFF on the
candidate, and only then the slow parts (STOP SLAVE, RESET SLAVE ALL purges
relay logs: ~180 ms) and the repointing of the other replicas.

Safety rules enforced here, not left to callers:
- the candidate is opened only after the old primary is fenced and the
  candidate has applied everything the old primary wrote;
- the old primary is unfenced only when the candidate is known read-only
  (never two writable primaries);
- every wait is bounded; a failed catch-up leads to unfencing (never left read-only).

One file per step, in order, each a collaborator built from what it needs: converge
(Convergence), fence (OldPrimaryFence, through the kit's one fence, kit/fence.py), catchup
(CatchUp), open_candidate (OpenCandidate), router (RouterFlip), reset (ResetNewPrimary), repoint
(RepointReplicas), reverse (ReverseReplication), verify (VerifyWrites); without_old
(WithoutOldPrimary) completes a switchover whose old primary died after the fence; switch_back
undoes any of them. A step that uses another is handed it (Convergence the fence, VerifyWrites and
WithoutOldPrimary the reverse replication). inputs.py holds what every step is built from
(StepInputs: servers, names, params, mode, log, clock) and the reads they all use, state.py what
they learn as the switchover runs (SwitchoverState), settings.py the bounds (SwitchoverParams),
servers.py the servers by name. `Switchover` composes them and is what procedures call.
"""

from __future__ import annotations

from typing import Any, Callable

from dbmigrate.clock import Clock
from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import Server
from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.db.inspector import Inspector, Session
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.kit.switchover.catchup import CatchUp
from dbmigrate.procedures.kit.switchover.converge import Convergence
from dbmigrate.procedures.kit.switchover.errors import ReplicationStopped
from dbmigrate.procedures.kit.switchover.fence import OldPrimaryFence
from dbmigrate.procedures.kit.switchover.inputs import StepInputs
from dbmigrate.procedures.kit.switchover.open_candidate import OpenCandidate
from dbmigrate.procedures.kit.switchover.repoint import RepointReplicas
from dbmigrate.procedures.kit.switchover.reset import ResetNewPrimary
from dbmigrate.procedures.kit.switchover.reverse import ReverseReplication
from dbmigrate.procedures.kit.switchover.router import RouterFlip, WriterRouter
from dbmigrate.procedures.kit.switchover.servers import Notify, Record, SwitchoverServers
from dbmigrate.procedures.kit.switchover.settings import SwitchoverParams
from dbmigrate.procedures.kit.switchover.state import SwitchoverState
from dbmigrate.procedures.kit.switchover.switch_back import switch_back
from dbmigrate.procedures.kit.switchover.verify import VerifyWrites
from dbmigrate.procedures.kit.switchover.without_old import WithoutOldPrimary
from dbmigrate.routing.holds import HeldRoute

__all__ = ["Notify", "Record", "ReplicationStopped", "Switchover", "SwitchoverServers",
           "SwitchoverParams", "WriterRouter", "switch_back"]


class Switchover:
    """`Switchover(servers, old, new, params, router)`: one method per step, each idempotent,
    each handed to the step's collaborator (a file per step: converge.py, fence.py, ... verify.py)."""

    def __init__(self, topo: SwitchoverServers, old: str, new: str, params: SwitchoverParams,
                 router: WriterRouter | None = None, *, dry_run: bool = False,
                 log: Notify | None = None, record: Record | None = None, clock: Clock | None = None):
        self.on = StepInputs(topo, old, new, params, dry_run, log or (lambda message, level="info": None),
                             record, clock or Clock())
        self.state = SwitchoverState.start(self.on)
        self._router = router
        self._compose()

    def _compose(self) -> None:
        on, state, router = self.on, self.state, self._router
        self.fencing = OldPrimaryFence(on, state, router)
        self.convergence = Convergence(on, state, self.fencing, router)
        self.catchup = CatchUp(on)
        self.opening = OpenCandidate(on, state)
        self.routing = RouterFlip(on, router)
        self.reset = ResetNewPrimary(on)
        self.repointing = RepointReplicas(on)
        self.reverse = ReverseReplication(on)
        self.verification = VerifyWrites(on, self.reverse)
        self.without_old = WithoutOldPrimary(on, self.reverse)

    # -- what callers read -----------------------------------------------------
    @property
    def router(self) -> WriterRouter | None:
        return self._router

    @property
    def topo(self) -> SwitchoverServers:
        return self.on.topo

    @property
    def old(self) -> str:
        return self.on.old

    @property
    def new(self) -> str:
        return self.on.new

    @property
    def s(self) -> SwitchoverParams:
        return self.on.params  # the procedure's params as they are (promote's, the schema swap's)

    @property
    def dry_run(self) -> bool:
        return self.on.dry_run

    @property
    def log(self) -> Notify:
        return self.on.log

    @property
    def record(self) -> Record | None:
        return self.on.record

    @property
    def clock(self) -> Clock:
        return self.on.clock

    @property
    def fence_expires_at(self) -> float | None:
        """Wall clock by which the last fence this instance set expires on the server (None: no expiry)."""
        return self.state.old_fence.expires_at

    @property
    def applied_at_fence(self) -> str | None:
        return self.state.applied_at_fence

    @property
    def sealed_sessions(self) -> list[Session]:
        return self.state.sealed_sessions

    # -- the reads every step uses (inputs.py) --------------------------------
    def server(self, name: str) -> Server:
        return self.on.server(name)

    def insp(self, name: str) -> Inspector:
        return self.on.insp(name)

    def apply(self, name: str) -> Applier:
        return self.on.apply(name)

    def replicates_from(self, name: str, source: str) -> bool:
        return self.on.replicates_from(name, source)

    def replicating_from(self, name: str, source: str) -> bool:
        return self.on.replicating_from(name, source)

    def drop_fence_expiry(self, name: str) -> None:
        self.on.drop_fence_expiry(name)

    def writable(self, name: str) -> bool:
        return self.on.writable(name)

    def writable_or_none(self, name: str) -> bool | None:
        return self.on.writable_or_none(name)

    # -- 0. converge (converge.py) --------------------------------------------
    def converge(self) -> tuple[str, int]:
        return self.convergence.converge()

    def prepare_window(self) -> set[str]:
        return self.convergence.prepare_window()

    # -- 1. fence (fence.py) --------------------------------------------------
    def is_fenced(self) -> bool:
        return self.fencing.is_fenced()

    def fence(self, before_retry: Callable[[], object] | None = None) -> tuple[str, str]:
        return self.fencing.fence(before_retry)

    def name_fence_blocker(self, error: DbmigrateError) -> DbmigrateError:
        return self.fencing.name_fence_blocker(error)

    def require_fence_holds(self, expires_at: float | None) -> None:
        self.fencing.require_fence_holds(expires_at)

    def end_sessions(self, name: str | None = None) -> str:
        return self.fencing.end_sessions(name)

    def holds_new_connections(self) -> bool:
        return self.fencing.holds_new_connections()

    def hold_and_end_idle(self, name: str | None = None,
                          journal: Callable[[HeldRoute], None] | None = None) -> str:
        return self.fencing.hold_and_end_idle(name, journal)

    def release_hold(self, to_new: str | None = None) -> str:
        return self.fencing.release_hold(to_new)

    def current_hold(self) -> HeldRoute | None:
        return self.fencing.current_hold()

    def release_leftover_hold(self, saved: dict[str, Any] | None) -> str:
        return self.fencing.release_leftover_hold(saved)

    def is_holding(self) -> bool:
        return self.fencing.is_holding()

    def seal_old(self, bypass: set[str] | None = None) -> tuple[str, str]:
        return self.fencing.seal_old(bypass)

    def bypass_users(self) -> set[str]:
        return self.fencing.bypass_users()

    def unfence_old(self, candidate_known_closed: bool, candidate_writable: "bool | None | object" = ...) -> str:
        return self.fencing.unfence_old(candidate_known_closed, candidate_writable)

    # -- 2. catch up (catchup.py) ---------------------------------------------
    def caught_up(self, position: str) -> bool:
        return self.catchup.caught_up(position)

    def wait_catchup(self, position: str) -> str:
        return self.catchup.wait_catchup(position)

    # -- 3. open the candidate (open_candidate.py) ----------------------------
    def is_open(self) -> bool:
        return self.opening.is_open()

    def open_candidate(self, stop_replica: bool = True, sealed: bool = False) -> str:
        return self.opening.open_candidate(stop_replica, sealed)

    # -- 4. router (router.py) ------------------------------------------------
    def router_points_to(self, name: str) -> bool:
        return self.routing.router_points_to(name)

    def switch_router(self, persist: bool = True) -> str:
        return self.routing.switch_router(persist)

    def confirm_router(self) -> str:
        return self.routing.confirm_router()

    # -- 5. forget the old source on the new primary (reset.py) --------------
    def has_replication_config(self, name: str) -> bool:
        return self.reset.has_replication_config(name)

    def reset_new_replication(self) -> str:
        return self.reset.reset_new_replication()

    # -- 6. repoint the other replicas (repoint.py) ---------------------------
    def replicas_repointed(self) -> bool:
        return self.repointing.replicas_repointed()

    def repoint_replicas(self, position: str) -> str:
        return self.repointing.repoint_replicas(position)

    def repoint(self, replica: str, source: str, position: str) -> None:
        self.repointing.repoint(replica, source, position)

    # -- 7. reverse replication (reverse.py) ----------------------------------
    def reverse_running(self) -> bool:
        return self.reverse.reverse_running()

    def start_reverse(self) -> str:
        return self.reverse.start_reverse()

    def errant_on_old(self) -> list[str]:
        return self.reverse.errant_on_old()

    def require_old_wrote_nothing(self, run_id: str) -> str:
        return self.reverse.require_old_wrote_nothing(run_id)

    def make_replica(self, name: str, source: str) -> None:
        self.reverse.make_replica(name, source)

    def wait_replica_running(self, name: str, timeout: float = 10) -> None:
        self.reverse.wait_replica_running(name, timeout)

    def stopped_with_error(self, name: str) -> ReplicaStatus | None:
        return self.reverse.stopped_with_error(name)

    # -- 8. verify (verify.py) ------------------------------------------------
    def verify_writes_flow(self, run_id: str, timeout: float | None = None, old_gone: bool = False) -> str:
        return self.verification.verify_writes_flow(run_id, timeout, old_gone)

    # -- completing without the old primary (without_old.py) ------------------
    def old_answers(self) -> bool:
        return self.without_old.old_answers()

    def takeover_facts(self, final_pos: str) -> tuple[list[str], list[str]]:
        return self.without_old.takeover_facts(final_pos)

    def repoint_without_old(self) -> str:
        return self.without_old.repoint_without_old()
