"""The planner's newer parts: balanced placement, merge to a target count, names, ports and
server ids, sizes files, the what-if table, and a fleet of 120 old servers. Pure logic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.plan_fleet import write_fleet
from dbmigrate.app.consolidate.plan import PlanRequest, make_plan
from dbmigrate.cli.main import app
from dbmigrate.config import HostSpec, PlanningSpec
from dbmigrate.exceptions import ConfigError, UsageError
from dbmigrate.procedures.consolidate.plan import GB, ShardDemand, plan, plan_from_dict
from dbmigrate.procedures.consolidate.sizes import load_sizes, parse_size
from dbmigrate.procedures.consolidate.whatif import parse_range, what_if

FLAT = PlanningSpec(headroom_pct=0, growth_pct=0, reserved_memory_gb=0, instance_overhead_mb=0,
                    qps_per_core=1000, min_buffer_pool_mb=8)


def shard(name, source, size_gb, ws_gb=0.1, qps=0.0):
    return ShardDemand(name, source, int(size_gb * GB), int(ws_gb * GB), qps)


def host(cores=8, memory_gb=16, disk_gb=100, max_instances=4, **kw):
    return HostSpec(cores=cores, memory_gb=memory_gb, disk_gb=disk_gb, max_instances=max_instances, **kw)


def per_host(p) -> dict[str, int]:
    return {h.name: len(h.instances) for h in p.hosts}


# -- placement ---------------------------------------------------------------------------

def test_no_host_is_left_empty_when_there_are_enough_instances():
    shards = [shard(f"s{i}", f"old-{i}", 1) for i in range(12)]
    p = plan(shards, {f"h{k}": host(max_instances=6) for k in range(4)}, FLAT)
    assert per_host(p) == {"h0": 3, "h1": 3, "h2": 3, "h3": 3}  # first-fit would have put 6 and 6
    assert p.warnings == []


def test_fewer_instances_than_hosts_is_said_with_the_way_out():
    p = plan([shard("s1", "a", 1), shard("s2", "b", 1)], {f"h{k}": host() for k in range(3)}, FLAT)
    assert sum(per_host(p).values()) == 2
    assert len(p.warnings) == 1 and "1 of 3 hosts get no instance (h2)" in p.warnings[0]
    assert "--instances-per-host" in p.warnings[0]
    spread = plan([shard("s1", "a", 1), shard("s2", "a", 1), shard("s3", "b", 1)],
                  {f"h{k}": host() for k in range(3)}, FLAT, "merge", instances_per_host=1)
    assert per_host(spread) == {"h0": 1, "h1": 1, "h2": 1} and spread.warnings == []


def test_when_an_even_spread_does_not_fit_first_fit_packs_it_and_says_so():
    # 50, 50, 34, 33, 33 GB on two 100 GB hosts: spreading leaves 84 | 83 and the last 33 fits neither;
    # packing puts 50 + 50 | 34 + 33 + 33.
    shards = [shard(n, n, g) for n, g in (("a", 50), ("b", 50), ("c", 34), ("d", 33), ("e", 33))]
    p = plan(shards, {"h1": host(max_instances=3), "h2": host(max_instances=3)}, FLAT)
    assert sorted(h.used.disk for h in p.hosts) == [pytest.approx(100), pytest.approx(100)]
    assert "packed first-fit" in p.warnings[0]


def test_instances_per_host_caps_every_host():
    shards = [shard(f"s{i}", f"old-{i}", 1) for i in range(6)]
    p = plan(shards, {"h1": host(max_instances=8), "h2": host(max_instances=8)}, FLAT, instances_per_host=3)
    assert per_host(p) == {"h1": 3, "h2": 3}
    with pytest.raises(Exception, match="max_instances=2"):
        plan(shards, {"h1": host(max_instances=8), "h2": host(max_instances=8)}, FLAT, instances_per_host=2)
    with pytest.raises(UsageError, match="give 1 to 64"):
        plan(shards, {"h1": host()}, FLAT, instances_per_host=0)


def test_merge_to_a_target_makes_equal_instances_and_keeps_old_servers_together():
    # 4 old servers of 6 shards, 2 hosts x 4 instances: 8 instances, each about 3 shards of one server.
    shards = [shard(f"{src}_{k}", src, 2) for src in ("a", "b", "c", "d") for k in range(6)]
    p = plan(shards, {"h1": host(max_instances=6), "h2": host(max_instances=6)}, FLAT, "merge", instances_per_host=4)
    assert per_host(p) == {"h1": 4, "h2": 4}
    assert sorted(len(i.shards) for i in p.instances) == [3] * 8
    assert all(len(i.sources) == 1 for i in p.instances)  # halves of one server, never a mix here
    assert p.settings["instances_per_host"] == 4
    # More servers than instances: several servers share one instance (multi-source), sizes still even.
    many = [shard(f"x{k}_{j}", f"x{k}", 1) for k in range(10) for j in range(2)]
    q = plan(many, {"h1": host(), "h2": host()}, FLAT, "merge", instances_per_host=2)
    assert len(q.instances) == 4 and sorted(len(i.shards) for i in q.instances) == [4, 4, 6, 6]
    assert all(i.config["gtid_strict_mode"] == "0" for i in q.instances)


# -- names, ports, server ids -----------------------------------------------------------

def test_names_ports_server_ids_and_sockets_follow_one_scheme_and_round_trip():
    shards = [shard(f"s{i}", f"old-{i}", 1) for i in range(4)]
    hosts = {"b": host(base_port=4400, run_dir="/run/x/"), "a": host(base_port=3306, datadir_root="/data/")}
    p = plan(shards, hosts, FLAT.model_copy(update={"server_id_base": 500}))
    got = [(i.name, i.port, i.slot, i.server_id, i.socket, i.datadir) for i in p.instances]
    assert got == [("a-1", 3306, 1, 501, "/run/mysqld/a-1.sock", "/data/a-1"),
                   ("a-2", 3307, 2, 502, "/run/mysqld/a-2.sock", "/data/a-2"),
                   ("b-1", 4400, 1, 503, "/run/x/b-1.sock", "/var/lib/mysql-instances/b-1"),
                   ("b-2", 4401, 2, 504, "/run/x/b-2.sock", "/var/lib/mysql-instances/b-2")]
    cfg = p.instance("b-2").config
    assert cfg["port"] == "4401" and cfg["server_id"] == "504" and cfg["socket"] == "/run/x/b-2.sock"
    assert cfg["pid_file"] == "/run/x/b-2.pid" and cfg["report_port"] == "4401"
    doc = json.loads(json.dumps(p.to_dict()))
    assert doc["version"] == 2 and plan_from_dict(doc).to_dict() == doc


def test_a_version_1_plan_still_loads_and_a_newer_one_is_refused():
    doc = plan([shard("s1", "a", 1)], {"h": host()}, FLAT).to_dict()
    v1 = {k: v for k, v in doc.items() if k not in ("version", "warnings")}
    v1["instances"] = [{k: v for k, v in i.items() if k not in ("server_id", "socket", "slot")}
                       for i in doc["instances"]]
    back = plan_from_dict(v1)
    assert back.instances[0].port == 3306 and back.instances[0].server_id == 0
    with pytest.raises(UsageError, match="newer than this dbmigrate reads"):
        plan_from_dict({**doc, "version": 3})


# -- sizes files ---------------------------------------------------------------------------

def test_sizes_from_csv_and_yaml_with_units(tmp_path):
    csv = tmp_path / "s.csv"
    csv.write_text("# measured 2024-05\nServer,Shard,bytes,working_set,qps\n"
                   "db-1,shard_1,120G,10G,35.5\ndb-1,shard_2,1073741824,,0\n")
    rows = load_sizes(csv, 0.5)
    assert [(r.name, r.source, r.size_bytes, r.working_set_bytes, r.qps) for r in rows] == [
        ("shard_1", "db-1", 120 * GB, 10 * GB, 35.5), ("shard_2", "db-1", GB, GB // 2, 0.0)]
    assert "0.5 of size" in rows[1].estimates["working_set"]
    yml = tmp_path / "s.yaml"
    yml.write_text("shards:\n  - {server: db-2, shard: s9, bytes: 2.5TiB, working_set: 512M, qps: 7}\n")
    (r,) = load_sizes(yml)
    assert r.size_bytes == int(2.5 * 1024 ** 4) and r.working_set_bytes == 512 * 1024 ** 2
    assert parse_size("1.5 GB") == int(1.5 * GB) and parse_size("12X") == "12X"


@pytest.mark.parametrize("text, suffix, expected", [
    ("server,shard,bytes,qps\ndb-1,s1,12X,1\n", ".csv", "s.csv:2: shard s1 on db-1: bytes: not a size (got '12X')"),
    ("server,shard,bytes,qps\ndb-1,s1,5,1\ndb-2,s1,6,1\n", ".csv", "s.csv:3: shard s1 is listed twice (also on db-1, line 2)"),
    ("server,bytes,qps\ndb-1,5,1\n", ".csv", "s.csv:1: the header names no column shard"),
    ("server,shard,bytes,qps\ndb-1,s1,1\n", ".csv", "s.csv:2: 3 values for 4 columns"),
    ("server,shard,bytes,qps\ndb-1,s1,5,-3\n", ".csv", "s.csv:2: shard s1 on db-1: qps: "),
    ("shards:\n  - {server: a, shard: s1, bytes: 1, qps: 1}\n  - {server: a, shard: 'bad name', bytes: 1, qps: 1}\n", ".yaml",
     "s.yaml:3: shard bad name on a: shard: not a schema name"),
    ("shards:\n  - {server: a, shard: s1, bytes: 1, qps: 1, colour: red}\n", ".yaml", "s.yaml:2: shard s1 on a: colour: unknown field"),
    ("shards: {a: 1}\n", ".yaml", "s.yaml:1: a sizes file is a list of rows"),
    # no qps: refused, never planned as 0 queries per second
    ("server,shard,bytes,working_set\ndb-1,s1,5,1\n", ".csv", "s.csv:1: the header names no column qps"),
    ("shards:\n  - {server: a, shard: s1, bytes: 1}\n", ".yaml",
     "s.yaml:2: shard s1 on a: qps: missing (the shard's measured queries per second; 0 for an idle one)"),
])
def test_a_bad_sizes_file_is_one_line_naming_file_line_and_field(tmp_path, text, suffix, expected):
    path = tmp_path / f"s{suffix}"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_sizes(path)
    assert e.value.message.startswith(str(tmp_path / expected.split(":")[0]))
    assert expected in e.value.message.replace(str(tmp_path) + "/", "") and "\n" not in e.value.message


def test_cli_refuses_a_bad_sizes_file_with_exit_2_before_planning(tmp_path):
    sizes, hosts = tmp_path / "s.csv", tmp_path / "h.yaml"
    sizes.write_text("server,shard,bytes,qps\ndb-1,s1,lots,1\n")
    hosts.write_text("hosts: {h1: {cores: 4, memory_gb: 8, disk_gb: 100}}\n")
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(app, ["consolidate", "plan", "--sizes", str(sizes), "--hosts", str(hosts),
                                 "--out", str(out)], env={"COLUMNS": "250"})
    assert r.exit_code == 2, r.output
    assert "s.csv:2: shard s1 on db-1: bytes: not a size" in r.output and not out.exists()
    r = CliRunner().invoke(app, ["consolidate", "plan", "--sizes", str(sizes)], env={"COLUMNS": "250"})
    assert r.exit_code == 2 and "exactly one of --hosts FILE and --from-inventory" in r.output


# -- what-if --------------------------------------------------------------------------------

def test_what_if_counts_hosts_per_instances_per_host_and_names_the_bound():
    assert parse_range("3-5,8") == [3, 4, 5, 8]
    with pytest.raises(UsageError):
        parse_range("5-3")
    shards = [shard(f"s{i}", f"old-{i}", 10, 1, 100) for i in range(12)]  # 12 instances of 10 GB
    rows = {r.per_host: r for r in what_if(shards, host(disk_gb=45, memory_gb=64), FLAT, "instance-per-group",
                                           [2, 3, 4, 6])}
    assert (rows[2].hosts, rows[2].bound_by) == (6, "instances")
    assert (rows[3].hosts, rows[3].bound_by) == (4, "instances")
    # 4 per host: 3 hosts by count, and by disk too (120 GB over 45 GB disks); 6 per host: 2 by count, 3 by disk
    assert (rows[4].hosts, rows[4].bound_by) == (3, "instances")
    assert (rows[6].hosts, rows[6].bound_by) == (3, "disk")
    assert rows[4].max_used.disk == pytest.approx(40) and rows[4].instances == 12
    assert rows[3].buffer_pool_mb[0] == rows[3].buffer_pool_mb[1] == 64 * 1024 // 3 // 8 * 8
    d = rows[4].to_dict()
    assert d["max_per_host_pct"]["disk"] == pytest.approx(88.9, abs=0.1)


# -- the fleet --------------------------------------------------------------------------------

def test_a_fleet_of_120_old_servers_lands_on_30_hosts_with_4_to_6_instances_each(tmp_path: Path):
    sizes, hosts = write_fleet(tmp_path)
    for strategy, k in (("instance-per-group", None), ("merge", 6)):
        result = make_plan(PlanRequest(sizes=sizes, hosts=hosts, strategy=strategy, instances_per_host=k,
                                       what_if="4-6"))
        p = result.plan
        counts = list(per_host(p).values())
        assert len(p.shards) == 2160 and len({s.source for s in p.shards}) == 120
        assert len(counts) == 30 and min(counts) >= 4 and max(counts) <= 6, counts
        assert p.warnings == []
        assert len({(i.address, i.port) for i in p.instances}) == len(p.instances)
        assert len({i.server_id for i in p.instances}) == len(p.instances)
        assert [r.per_host for r in result.what_if] == [4, 5, 6] and all(r.hosts for r in result.what_if)


def test_plan_at_80_columns_cuts_no_id_address_or_figure(tmp_path):
    sizes, hosts = tmp_path / "s.csv", tmp_path / "h.yaml"
    sizes.write_text("server,shard,bytes,working_set,qps\ndb-01.prod.example.com,shard_0001,100G,20G,350\n"
                     "db-02.prod.example.com,shard_0003,80G,10G,200\n")
    hosts.write_text("hosts:\n  host-a.prod.example.com: {cores: 16, memory_gb: 128, disk_gb: 2000, "
                     "address: 10.0.0.21, max_instances: 4}\n")
    r = CliRunner().invoke(app, ["consolidate", "plan", "--sizes", str(sizes), "--hosts", str(hosts)],
                           env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "…" not in r.output
    for whole in ("shard_0001", "shard_0003", "db-01.prod.example.com", "host-a.prod.example.com-1",
                  "10.0.0.21:3306", "10.0.0.21:3307", "100001"):
        assert whole in r.output, (whole, r.output)
    assert max(len(line) for line in r.output.splitlines()) <= 80
