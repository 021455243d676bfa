"""The consolidation capacity planner: pure logic, no server."""

from __future__ import annotations

import json

import pytest

from dbmigrate.config import HostSpec, PlanningSpec
from dbmigrate.procedures.consolidate.plan import (
    GB,
    PlanDoesNotFit,
    ShardDemand,
    connection_name,
    plan,
    plan_from_dict,
    split_by_size,
)

MB = 1024 * 1024
# No growth, no headroom, no reserve unless a test says so: the arithmetic stays readable.
FLAT = PlanningSpec(headroom_pct=0, growth_pct=0, reserved_memory_gb=0, instance_overhead_mb=0,
                    qps_per_core=1000, min_buffer_pool_mb=8)


def shard(name, source, size_gb, ws_gb, qps=0.0):
    return ShardDemand(name, source, int(size_gb * GB), int(ws_gb * GB), qps)


def host(cores=8, memory_gb=16, disk_gb=100, max_instances=4, **kw):
    return HostSpec(cores=cores, memory_gb=memory_gb, disk_gb=disk_gb, max_instances=max_instances, **kw)


SHARDS = [shard("s1", "old-a", 10, 2, 500), shard("s2", "old-a", 20, 4, 1000),
          shard("s3", "old-b", 30, 1, 200), shard("s4", "old-b", 5, 1, 100)]


def test_instance_per_group_keeps_each_old_servers_shards_together():
    p = plan(SHARDS, {"h1": host()}, FLAT)
    assert [(i.name, i.shards, i.sources) for i in p.instances] == [
        ("h1-1", ["s1", "s2"], ["old-a"]), ("h1-2", ["s3", "s4"], ["old-b"])]
    a = p.instance("h1-1")
    assert a.demand.disk == pytest.approx(30) and a.demand.memory == pytest.approx(6)
    assert a.demand.cpu == pytest.approx(1.5)
    assert (a.port, p.instance("h1-2").port) == (3306, 3307)
    assert a.datadir == "/var/lib/mysql-instances/h1-1"
    assert "gtid_strict_mode" not in a.config  # one source: strict GTID ordering still holds


def test_merge_puts_several_old_servers_in_one_instance_with_per_source_filters():
    p = plan(SHARDS, {"h1": host()}, FLAT, strategy="merge")
    assert len(p.instances) == 1
    only = p.instances[0]
    assert only.shards == ["s1", "s2", "s3", "s4"] and only.sources == ["old-a", "old-b"]
    assert only.config["gtid_strict_mode"] == "0"
    assert only.config["old_a.replicate_wild_do_table"] == "s1.%,s2.%"
    assert only.config["old_b.replicate_wild_do_table"] == "s3.%,s4.%"


def test_buffer_pool_is_the_hosts_memory_split_by_working_set():
    settings = FLAT.model_copy(update={"instance_overhead_mb": 512})
    p = plan(SHARDS, {"h1": host(memory_gb=16)}, settings)
    bp = {i.name: i.buffer_pool_mb for i in p.instances}
    budget = 16 * 1024 - 2 * 512
    # working sets 6 GB and 2 GB: three quarters and one quarter, rounded down to 8 MB
    assert bp == {"h1-1": int(budget * 0.75) // 8 * 8, "h1-2": int(budget * 0.25) // 8 * 8}
    assert p.instance("h1-1").config["innodb_buffer_pool_size"] == f"{bp['h1-1']}M"


def test_headroom_and_growth_are_applied_before_fitting():
    one = [shard("s1", "old-a", 80, 1)]
    assert plan(one, {"h1": host(disk_gb=100)}, FLAT).instances[0].demand.disk == pytest.approx(80)
    with pytest.raises(PlanDoesNotFit) as e:
        plan(one, {"h1": host(disk_gb=100)}, FLAT.model_copy(update={"headroom_pct": 25}))
    assert "disk: need 80.00 GB, the hosts offer 75.00 GB usable (short by 5.00 GB)" in e.value.message
    with pytest.raises(PlanDoesNotFit) as e:
        plan(one, {"h1": host(disk_gb=100)}, FLAT.model_copy(update={"growth_pct": 50}))
    assert "short by 20.00 GB" in e.value.message


def test_refusal_names_the_resource_and_the_shortfall():
    with pytest.raises(PlanDoesNotFit) as e:
        plan(SHARDS, {"h1": host(memory_gb=6)}, FLAT)  # 8 GB of working set
    assert e.value.message.startswith("the shards do not fit")
    assert "memory: need 8.00 GB, the hosts offer 6.00 GB usable (short by 2.00 GB)" in e.value.message
    assert "disk" not in e.value.message and e.value.hint


def test_cpu_shortfall_is_named_in_cores():
    with pytest.raises(PlanDoesNotFit) as e:
        plan(SHARDS, {"h1": host(cores=1)}, FLAT)  # 1800 qps at 1000 per core
    assert "cpu: need 1.80 cores, the hosts offer 1.00 cores usable (short by 0.80 cores)" in e.value.message


def test_enough_in_total_but_no_single_host_fits_an_instance():
    hosts = {"h1": host(disk_gb=35, max_instances=1), "h2": host(disk_gb=35, max_instances=1)}
    # old-a's group needs 30 GB, old-b's 35 GB, while the total (65) fits the 70 offered.
    p = plan(SHARDS, hosts, FLAT)
    assert {i.host for i in p.instances} == {"h1", "h2"}
    with pytest.raises(PlanDoesNotFit) as e:
        plan(SHARDS, {"h1": host(disk_gb=70, max_instances=1)}, FLAT)
    assert "no host can take the instance for s1, s2" in e.value.message
    assert "h1 already runs max_instances=1" in e.value.message


def test_a_shard_bigger_than_any_host_is_refused_by_name():
    with pytest.raises(PlanDoesNotFit) as e:
        plan([shard("big", "old-a", 60, 1)], {"h1": host(disk_gb=50), "h2": host(disk_gb=50)}, FLAT)
    assert "shard big alone needs 60.00 GB of disk" in e.value.message and "short by 10.00 GB" in e.value.message


def test_instances_are_spread_evenly_over_the_hosts():
    shards = [shard(f"s{i}", f"old-{i}", 10 * i, 1) for i in range(1, 5)]  # groups of 10, 20, 30, 40 GB
    p = plan(shards, {"a": host(disk_gb=70), "b": host(disk_gb=70)}, FLAT)
    placed = {h.name: sorted(s for i in p.instances if i.host == h.name for s in i.shards) for h in p.hosts}
    # biggest first, each to the host with fewer instances, then the lighter one: 40 | 30, 20 | 10
    assert placed == {"a": ["s1", "s4"], "b": ["s2", "s3"]}
    usage = {h.name: h.used.disk for h in p.hosts}
    assert usage == {"a": pytest.approx(50), "b": pytest.approx(50)}
    assert p.warnings == []


def test_output_is_deterministic_and_round_trips():
    hosts = {"b": host(), "a": host()}
    one = plan(list(reversed(SHARDS)), hosts, FLAT).to_dict()
    two = plan(SHARDS, dict(reversed(list(hosts.items()))), FLAT).to_dict()
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)
    back = plan_from_dict(json.loads(json.dumps(one)))
    assert back.to_dict() == one


def test_query_rate_split_by_size_and_connection_names():
    assert split_by_size(100, {"a": 3 * MB, "b": MB}, ["a", "b"]) == {"a": 75, "b": 25}
    assert split_by_size(10, {"a": 0, "b": 0}, ["a", "b"]) == {"a": 5, "b": 5}
    assert connection_name("db-Orders.1") == "db_orders_1"


def test_unknown_strategy_and_duplicate_shards_are_usage_errors():
    from dbmigrate.exceptions import UsageError

    with pytest.raises(UsageError, match="unknown strategy"):
        plan(SHARDS, {"h1": host()}, FLAT, strategy="spread")
    with pytest.raises(UsageError, match="unique across old servers: s1"):
        plan([*SHARDS, shard("s1", "old-c", 1, 1)], {"h1": host()}, FLAT)
