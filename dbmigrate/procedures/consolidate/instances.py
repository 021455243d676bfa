"""Provisioning: each planned instance answers (created by the installed provisioner where
there is one) and stays read-only until its cutover. The instances are provisioned side by
side, `fleet.concurrency` at a time: each one's creation is independent of the others'."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.runner import explain
from dbmigrate.engine.step import FunctionStep
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.consolidate.plan import PlannedInstance
from dbmigrate.procedures.consolidate.provision import provisioner_for
from dbmigrate.procedures.kit.fence import hold_read_only
from dbmigrate.procedures.consolidate.context import (
    ConsolidateContext,
    ConsolidateError,
    address_of,
    edit_state,
    applier_of,
    resources_of,
    server_of,
    state_of,
)


def answers(ctx: ConsolidateContext, name: str) -> bool:
    try:
        if Inspector(server_of(ctx, name)).reachable():
            return True
    except DbmigrateError:
        pass
    resources_of(ctx).servers.forget(name)
    return False


def provision_one(ctx: ConsolidateContext, inst: PlannedInstance) -> str:
    """Create `inst` (through its host's provisioner) or find it answering; then read-only."""
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
    hold_read_only(applier_of(ctx, inst.name))
    return (f"{inst.name} on {inst.host} answers at {address_of(ctx, inst.name)} "
            f"(buffer pool {inst.buffer_pool_mb} MB), read-only until its cutover")


def provisioned(ctx: ConsolidateContext, inst: PlannedInstance) -> bool:
    """Created by this run (sandbox) or made beforehand, and answering."""
    return (inst.name in state_of(ctx).instances or not inst.sandbox) and answers(ctx, inst.name)


def provision_instances(instances: list[PlannedInstance]) -> FunctionStep:
    """One step for every planned instance, `fleet.concurrency` of them at a time (creating a
    sandbox instance takes about a second, most of it mariadb-install-db). Each instance that
    is ready is journaled as it ends (metric `instance_provisioned_s`); one that fails leaves
    the others created, and the step then fails naming it: resume provisions only what is missing."""
    hosts = sorted({i.host for i in instances})

    def run(ctx: ConsolidateContext) -> str:
        if ctx.dry_run:
            return f"would create {len(instances)} instance(s) on {', '.join(hosts)}"
        todo = [i for i in instances if not provisioned(ctx, i)]
        at_once = max(1, min(ctx.params.fleet.concurrency, len(todo)))

        def one(inst: PlannedInstance) -> str:
            t = time.monotonic()
            sentence = provision_one(ctx, inst)
            ctx.metric("instance_provisioned_s", round(time.monotonic() - t, 2), "s", instance=inst.name)
            return sentence

        with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="provision") as pool:
            futures = {i.name: pool.submit(one, i) for i in todo}
        done, failed = [], []
        for name, f in futures.items():
            try:
                done.append(f.result())
            except Exception as exc:  # one instance's failure is its own: the others are kept
                failed.append(f"{name}: {exc.message if isinstance(exc, DbmigrateError) else explain(exc)}")
        if failed:
            raise ConsolidateError(f"{len(failed)} of {len(todo)} planned instance(s) not provisioned: "
                                   + "; ".join(failed),
                                   hint=f"{len(done)} other(s) are ready and stay so; fix the cause, then "
                                        "`dbmigrate resume RUN` provisions only the missing ones")
        already = len(instances) - len(todo)
        return (f"{len(done)} instance(s) provisioned ({at_once} at a time)"
                + (f", {already} already there" if already else "") + ": " + "; ".join(done))

    def check(ctx: ConsolidateContext) -> bool:
        return not ctx.dry_run and all(provisioned(ctx, i) for i in instances)

    return FunctionStep(f"provision {len(instances)} instance(s) on {', '.join(hosts)}", run, check=check,
                        describe=lambda c: [(i.name, f"create mysqld {i.name} on {i.host}: "
                                                     + ", ".join(f"{k}={v}" for k, v in i.config.items()))
                                            for i in instances])
