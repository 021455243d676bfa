"""5. Reset: the new primary forgets its old source (after writes are open: it is slow)."""

from __future__ import annotations

from dbmigrate.procedures.kit.switchover.inputs import StepInputs


class ResetNewPrimary:
    """5. The new primary forgets its old source."""

    def __init__(self, on: StepInputs):
        self.on, self.new, self.clock = on, on.new, on.clock

    def has_replication_config(self, name: str) -> bool:
        return self.on.insp(name).replica_status() is not None

    def reset_new_replication(self) -> str:
        t0 = self.clock.monotonic()
        a = self.on.apply(self.new)
        a.stop_replica()
        a.reset_replica_all()
        return f"{self.new} forgot its old source (RESET SLAVE ALL, {(self.clock.monotonic() - t0) * 1000:.0f} ms)"
