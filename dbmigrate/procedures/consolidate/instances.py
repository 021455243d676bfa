"""Provisioning: each planned instance answers (created by the installed provisioner where
there is one) and stays read-only until its cutover."""

from __future__ import annotations

from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.step import FunctionStep, RunContext
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.consolidate.plan import PlannedInstance
from dbmigrate.procedures.consolidate.provision import provisioner_for
from dbmigrate.procedures.consolidate.context import (
    ConsolidateError,
    address_of,
    edit_state,
    applier_of,
    resources_of,
    server_of,
    state_of,
)


def answers(ctx: RunContext, name: str) -> bool:
    try:
        if Inspector(server_of(ctx, name)).reachable():
            return True
    except DbmigrateError:
        pass
    resources_of(ctx).servers.forget(name)
    return False


def provision_step(inst: PlannedInstance):
    def run(ctx: RunContext) -> str:
        if ctx.dry_run:
            return f"would create {inst.name} on {inst.host}"
        provisioner = provisioner_for(inst)
        if inst.sandbox and provisioner is None:
            raise ConsolidateError(f"{inst.name} is planned on sandbox host {inst.sandbox}, and no sandbox "
                                   "provisioner is installed in this process",
                                   hint="run the playbook with the dbmigrate command (it installs the provisioner)")
        if provisioner is not None:
            address = provisioner.create(inst)
            if not address.endswith(f":{inst.port}"):
                # Routes, seeds and rollback would name a port the plan file does not: refuse.
                raise ConsolidateError(f"{inst.name} was created at {address}, not at the plan's port {inst.port}",
                                       hint="plan again with ports the host can give (hosts: NAME: base_port:)")
            with edit_state(ctx) as st:
                st.instances[inst.name] = address
        elif not answers(ctx, inst.name):
            raise ConsolidateError(
                f"{inst.name} does not answer at {inst.address}:{inst.port} on host {inst.host}",
                hint=f"create it (datadir {inst.datadir}, settings: {', '.join(f'{k}={v}' for k, v in inst.config.items())}), "
                     "e.g. from a before_phase hook, then: dbmigrate resume RUN")
        # Nothing may write here but replication until the cutover opens it.
        applier_of(ctx, inst.name).set_read_only(True)
        return (f"{inst.name} on {inst.host} answers at {address_of(ctx, inst.name)} "
                f"(buffer pool {inst.buffer_pool_mb} MB), read-only until its cutover")

    def check(ctx: RunContext) -> bool:
        return not ctx.dry_run and (inst.name in state_of(ctx).instances or not inst.sandbox) \
            and answers(ctx, inst.name)

    return FunctionStep(f"provision {inst.name} on {inst.host}", run, check=check,
                        describe=lambda c: [(inst.name, f"create mysqld {inst.name} on {inst.host}: "
                                                        + ", ".join(f"{k}={v}" for k, v in inst.config.items()))])
