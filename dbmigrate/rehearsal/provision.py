"""Planned consolidation instances on sandbox hosts become sandbox instances (rehearsals)."""

from __future__ import annotations

from dbmigrate.procedures.consolidate.plan import PlannedInstance
from dbmigrate.procedures.consolidate.provision import SANDBOX, register_provisioner, sandbox_extra


class SandboxProvisioner:
    def create(self, instance: PlannedInstance) -> str:
        from dbmigrate.rehearsal.sandbox.manager import Sandboxes

        ist = Sandboxes().add_instance(instance.sandbox, instance.name, buffer_pool_mb=instance.buffer_pool_mb,
                                       cluster=instance.name, extra=sandbox_extra(instance.config),
                                       port=instance.port)  # the plan's port: nothing downstream re-derives it
        return f"127.0.0.1:{ist.port}"

    def datadir(self, instance: PlannedInstance) -> str:
        from dbmigrate.rehearsal.sandbox.manager import Sandboxes

        return str(Sandboxes().find(instance.sandbox).spec(instance.name).datadir)

    def stop(self, instance: PlannedInstance) -> None:
        from dbmigrate.rehearsal.sandbox.manager import Sandboxes

        Sandboxes().stop_instance(instance.sandbox, instance.name)

    def start(self, instance: PlannedInstance) -> str:
        from dbmigrate.rehearsal.sandbox.manager import Sandboxes

        boxes = Sandboxes()
        boxes.start_instance(instance.sandbox, instance.name)
        return f"127.0.0.1:{boxes.find(instance.sandbox).instances[instance.name].port}"


def install() -> None:
    register_provisioner(SANDBOX, SandboxProvisioner())
