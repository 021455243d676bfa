"""5. Reset: the new primary forgets its old source (after writes are open: it is slow)."""

from __future__ import annotations

from dbmigrate.procedures.kit.switchover.base import SwitchoverBase


class ResetSteps(SwitchoverBase):
    # -- 5. forget the old source on the new primary -------------------------
    def has_replication_config(self, name: str) -> bool:
        return self.insp(name).replica_status() is not None

    def reset_new_replication(self) -> str:
        t0 = self.clock.monotonic()
        a = self.apply(self.new)
        a.stop_replica()
        a.reset_replica_all()
        return f"{self.new} forgot its old source (RESET SLAVE ALL, {(self.clock.monotonic() - t0) * 1000:.0f} ms)"
