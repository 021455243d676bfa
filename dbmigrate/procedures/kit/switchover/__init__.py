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

One file per step, in order: converge, fence (through the kit's one fence, kit/fence.py),
catchup, open_candidate, router, reset, repoint, reverse, verify; without_old completes a
switchover whose old primary died after the fence; switch_back undoes any of them. base.py holds
what every step shares, settings.py the bounds (SwitchoverParams), servers.py the servers by name.
"""

from __future__ import annotations

from dbmigrate.procedures.kit.switchover.converge import ConvergeSteps
from dbmigrate.procedures.kit.switchover.fence import FenceSteps
from dbmigrate.procedures.kit.switchover.catchup import CatchUpSteps
from dbmigrate.procedures.kit.switchover.open_candidate import OpenSteps
from dbmigrate.procedures.kit.switchover.router import RouterSteps
from dbmigrate.procedures.kit.switchover.reset import ResetSteps
from dbmigrate.procedures.kit.switchover.repoint import RepointSteps
from dbmigrate.procedures.kit.switchover.reverse import ReverseSteps
from dbmigrate.procedures.kit.switchover.verify import VerifySteps
from dbmigrate.procedures.kit.switchover.without_old import WithoutOldSteps
from dbmigrate.procedures.kit.switchover.base import SwitchoverBase, WriterRouter
from dbmigrate.procedures.kit.switchover.errors import ReplicationStopped
from dbmigrate.procedures.kit.switchover.servers import Notify, Record, SwitchoverServers
from dbmigrate.procedures.kit.switchover.settings import SwitchoverParams
from dbmigrate.procedures.kit.switchover.switch_back import switch_back

__all__ = ["Notify", "Record", "ReplicationStopped", "Switchover", "SwitchoverServers",
           "SwitchoverParams", "WriterRouter", "switch_back"]


class Switchover(ConvergeSteps, FenceSteps, CatchUpSteps, OpenSteps, RouterSteps, ResetSteps, RepointSteps,
                 ReverseSteps, VerifySteps, WithoutOldSteps):
    """`Switchover(servers, old, new, params, router)`: one method per step, each idempotent
    (a file per step: converge.py, fence.py, ... verify.py; the shared state in base.py)."""
