"""4. Router: writes go to the new primary."""

from __future__ import annotations

from dbmigrate.procedures.kit.switchover.base import SwitchoverBase


class RouterSteps(SwitchoverBase):
    # -- 4. router -----------------------------------------------------------
    def router_points_to(self, name: str) -> bool:
        if self.router is None:
            return True
        host, port = self._addr(name)
        writer = self.router.current().writer
        return writer is not None and writer.rsplit(":", 1) == [host, str(port)]

    def switch_router(self, persist: bool = True) -> str:
        """`persist=False`: only the flip; the read-back and the router's copy for restarts
        are `confirm_router`'s, after the fenced window."""
        if self.router is None:
            return "no router configured: applications must be repointed (hooks can do it)"
        if self.dry_run:
            for line in self.router.describe_switch(self.server(self.new), self.server(self.old)):
                if self.record:
                    self.record("router", line)
            return f"would switch the writer from {self.old} to {self.new}"
        t0 = self.clock.monotonic()
        self.router.switch_writer(self.server(self.new), self.server(self.old), persist=persist)
        return f"router sends writes to {self.new} (switched in {(self.clock.monotonic() - t0) * 1000:.1f} ms)"

    def confirm_router(self) -> str:
        """After the fenced window: the flip made with persist=False is read back and saved for
        restarts of the router; a router that lost it meanwhile (restarted from its state
        file) is switched again."""
        if self.router is None:
            return "no router configured"
        if self.dry_run:
            return f"would check that the router sends writes to {self.new} only and save that route"
        self.router.switch_writer(self.server(self.new), self.server(self.old))
        return f"router sends writes to {self.new} only (read back, saved for its restarts)"
