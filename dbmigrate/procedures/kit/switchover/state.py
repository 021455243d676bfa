"""What the steps of one switchover learn as it runs and hand on to each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from dbmigrate.db.inspector import Session
from dbmigrate.procedures.kit.fence import Fence, FencedServer
from dbmigrate.procedures.kit.switchover.inputs import StepInputs


@dataclass
class SwitchoverState:
    """One per switchover, shared by the steps that read or change it."""

    # The kit's fence of the old primary (its expiry, watchdog, attempts and budget).
    old_fence: Fence[str]
    window_ready: bool = False  # prepare_window ran: the checks before the fence are done
    # The final position the candidate was seen to apply within the fenced catch-up budget:
    # the catch-up step need not ask again inside the window.
    applied_at_fence: str | None = None
    # Sessions of accounts that bypass read_only that seal_old ended: who may have written after the fence.
    sealed_sessions: list[Session] = field(default_factory=list)

    @classmethod
    def start(cls, on: StepInputs) -> SwitchoverState:
        """The state before any step ran: the old primary's fence built, nothing learnt yet."""
        old, params = on.old, on.params
        return cls(Fence(
            old, FencedServer(inspector=lambda: on.insp(old), applier=lambda: on.apply(old),
                              bounded=lambda seconds: on.topo.bounded(seconds, old),
                              side_session=lambda timeout_s: on.topo.side_session(old, timeout_s)),
            params, final_position=lambda insp, read: read if read is not None else insp.gtid_binlog_pos(),
            catchup_timeout_s=params.catchup_timeout_s, targets=on.new, log=on.log, clock=on.clock,
            dry_run=on.dry_run))
