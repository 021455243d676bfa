"""The provision phase: planned instances created side by side, at most `fleet.concurrency` at
a time; one that fails leaves the others created, is named, and is the only one resume creates."""

from __future__ import annotations

import threading
import time

import pytest

from dbmigrate.engine.events import EventBus
from dbmigrate.engine.journal import Journal
from dbmigrate.engine.step import RunContext
from dbmigrate.exceptions import SandboxError
from dbmigrate.procedures.consolidate import instances
from dbmigrate.procedures.consolidate.context import ConsolidateError, ConsolidateParams, PlanOnly
from dbmigrate.procedures.consolidate.plan import ConsolidationPlan, Demand, PlannedInstance, ShardDemand
from dbmigrate.procedures.consolidate.provision import SANDBOX, register_provisioner
from dbmigrate.procedures.consolidate.resources import ConsolidateState


def _plan(n: int) -> ConsolidationPlan:
    shards = [ShardDemand(f"s{k}", f"old{k}", 1, 1, 0.0) for k in range(n)]
    insts = [PlannedInstance(f"i{k}", "h1", "127.0.0.1", 20000 + k, "/d", [f"s{k}"], [f"old{k}"], Demand(), 0.0,
                             shard_sources={f"s{k}": f"old{k}"}, sandbox="box") for k in range(n)]
    return ConsolidationPlan("instance-per-group", {}, shards, insts, [])


class SlowProvisioner:
    """Creates an instance in 0.1 s, counting how many are created at once; `broken` fail."""

    def __init__(self, broken: set[str]):
        self.broken, self.created, self.running, self.peak = broken, [], 0, 0
        self.lock = threading.Lock()

    def create(self, inst: PlannedInstance) -> str:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            time.sleep(0.1)
            if inst.name in self.broken:
                raise SandboxError(f"mariadb-install-db failed for {inst.name}")
            with self.lock:
                self.created.append(inst.name)
            return f"127.0.0.1:{inst.port}"
        finally:
            with self.lock:
                self.running -= 1


@pytest.fixture
def provisioner(monkeypatch):
    p = SlowProvisioner({"i3"})
    register_provisioner(SANDBOX, p)
    read_only: list[str] = []
    monkeypatch.setattr(instances, "applier_of", lambda ctx, name: type(
        "A", (), {"set_read_only": staticmethod(lambda on: read_only.append(name) if on else None)})())
    monkeypatch.setattr(instances, "address_of", lambda ctx, name: f"127.0.0.1:{20000 + int(name[1:])}")
    monkeypatch.setattr(instances, "answers", lambda ctx, name: name in p.created)
    p.read_only = read_only
    yield p
    from dbmigrate.procedures.consolidate import provision

    provision._PROVISIONERS.pop(SANDBOX, None)


def test_instances_are_created_side_by_side_and_one_failure_is_named_and_alone_retried(provisioner):
    plan = _plan(6)
    step = instances.provision_instances(plan.instances)
    with Journal(":memory:") as j:
        j.create_run("r1", procedure="consolidate", cluster="c")
        bus = EventBus()
        bus.subscribe(j.record)
        ctx = RunContext(run_id="r1", procedure="consolidate", cluster="c", journal=j, bus=bus,
                         params=ConsolidateParams(plan="p.json", fleet={"concurrency": 3}), resources=PlanOnly(plan))
        t = time.monotonic()
        with pytest.raises(ConsolidateError, match=r"1 of 6 planned instance\(s\) not provisioned: i3: "
                                                   r"mariadb-install-db failed for i3") as e:
            step.run(ctx)
        assert time.monotonic() - t < 0.5  # six creations of 0.1 s, three at a time: not one after the other
        assert provisioner.peak == 3  # never more than fleet.concurrency at once
        assert "5 other(s) are ready" in e.value.hint
        ready = {"i0", "i1", "i2", "i4", "i5"}
        assert set(ConsolidateState.load(ctx.state).instances) == ready  # journaled: resume skips them
        assert set(provisioner.read_only) == ready  # each read-only until its cutover
        assert {m["labels"]["instance"] for m in j.metric_rows("r1", "instance_provisioned_s")} == ready
        assert not step.check(ctx)

        provisioner.broken.clear()  # the cause fixed: resume creates i3 alone
        said = step.run(ctx)
        assert provisioner.created[-1] == "i3" and provisioner.created.count("i3") == 1 and len(provisioner.created) == 6
        assert said.startswith("1 instance(s) provisioned (1 at a time), 5 already there: i3 on h1 answers")
        assert step.check(ctx)


def test_without_fleet_concurrency_instances_are_created_one_at_a_time(provisioner):
    provisioner.broken.clear()
    plan = _plan(3)
    with Journal(":memory:") as j:
        j.create_run("r1", procedure="consolidate", cluster="c")
        ctx = RunContext(run_id="r1", procedure="consolidate", cluster="c", journal=j, bus=EventBus(),
                         params=ConsolidateParams(plan="p.json"), resources=PlanOnly(plan))
        assert instances.provision_instances(plan.instances).run(ctx).startswith("3 instance(s) provisioned (1 at a time)")
    assert provisioner.peak == 1
