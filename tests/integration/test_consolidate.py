"""Shard consolidation on real servers, under a write load per shard.

Two old servers (standalone instances) hold shard_1, shard_2 and shard_3, shard_4.
Applications find each shard's writer in a DSN file. The capacity plan puts them
on one target host (a sandbox standing in for a multi-instance host), then the
consolidate playbook seeds, replicates, fences and routes. One writer per shard
follows the DSN file the way an application must (reconnect on read-only, retry
an unknown outcome with the same id) and every acknowledged id is checked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dbmigrate.app.runs import resolve_journal_path, rollback_run, start_run
from dbmigrate.config import HostSpec
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.journal import Journal
from dbmigrate.procedures.consolidate.plan import measure_shards, plan
from dbmigrate.procedures.consolidate.resources import ConsolidateState
from dbmigrate.routing.dsn_file import DsnFileRouter

from dbmigrate.rehearsal.provision import install as install_sandbox_provisioner
from dbmigrate.rehearsal.verify.shard_writer import ShardWriter, ids_on
from tests.conftest import run_cli
from tests.integration.shard_kit import legacy_shards
from tests import jsonlines

pytestmark = pytest.mark.integration

NAME = "consol"
OLD = {"consol-1": ["shard_1", "shard_2"], "consol-old2": ["shard_3", "shard_4"]}
SHARDS = [s for shards in OLD.values() for s in shards]


@pytest.fixture(scope="module", autouse=True)
def sandbox_provisioner():
    """The runs here are started in this process: the sandbox creates the planned instances,
    as it does for `dbmigrate run` on the command line."""
    install_sandbox_provisioner()


@pytest.fixture(scope="module")
def legacy(boxes):
    # The sandbox creates each instance at the plan's port: give the host a free range.
    hosts = {"h1": {"cores": 2, "memory_gb": 1, "disk_gb": 5, "max_instances": 2, "sandbox": NAME,
                    "base_port": free_base_port(2)}}
    state, inv, routes = legacy_shards(boxes, NAME, OLD, rows=300, hosts=hosts)
    yield state, inv, routes
    boxes.down(NAME)


def status(inv, plan_file: Path) -> dict:
    r = run_cli("consolidate", "status", "--plan", str(plan_file), "--inventory", str(inv.path), "--json")
    assert r.returncode in (0, 1), r.stderr
    return jsonlines.result(r.stdout)


def free_base_port(n: int) -> int:
    from dbmigrate.rehearsal.sandbox.ports import free_port_range

    return free_port_range(n)


def address(inv, server: str) -> str:
    spec = inv.cluster(NAME).servers[server]
    return f"{spec.host}:{spec.port}"


def playbook(state, plan_file: Path, strategy: str) -> Path:
    path = state.path / f"consolidate-{strategy}.yaml"
    path.write_text(yaml.safe_dump({
        "procedure": "consolidate", "inventory": "legacy.yaml", "cluster": NAME,
        "params": {"plan": plan_file.name, "strategy": strategy, "catchup_timeout_s": 5, "fence_drain_timeout_s": 0.3}}))
    return path


def start_writers(inv, routes) -> dict[str, ShardWriter]:
    creds = inv.app_credentials(NAME)
    writers = {sh: ShardWriter(routes, sh, creds, interval_s=0.004) for sh in SHARDS}
    for w in writers.values():
        w.start()
    try:
        for sh, w in writers.items():
            assert w.wait_acks_on(w.writer(), 20)
    except BaseException:
        stop_writers(writers)
        raise
    return writers


def stop_writers(writers) -> None:
    for w in writers.values():
        w.stop_flag.set()
    for w in writers.values():
        w.join(10)


def test_plan_command_measures_and_places_each_old_server_in_its_own_instance(legacy):
    state, inv, _ = legacy
    out = state.path / "plan.json"
    r = run_cli("consolidate", "plan", "--inventory", str(inv.path), "--from-inventory", "--sample-s", "0.3",
                "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "h1-1" in r.stdout and "shard_1, shard_2" in r.stdout and "of 2" in r.stdout
    # Both old servers measured at once, with a progress line each on stderr.
    assert "2 server(s), 2 at a time" in r.stderr and "[2/2]" in r.stderr, r.stderr
    doc = json.loads(out.read_text())
    assert [(i["name"], i["shards"], i["sources"]) for i in doc["instances"]] == [
        ("h1-1", ["shard_1", "shard_2"], ["consol-1"]), ("h1-2", ["shard_3", "shard_4"], ["consol-old2"])]
    for sh in doc["shards"]:
        assert sh["size_bytes"] > 0 and "Com_*" in sh["estimates"]["qps"]
    # The old shard servers are independent primaries, each its own replication tree: not a problem.
    r = run_cli("topology", "show", "--inventory", str(inv.path), "--cluster", NAME, "--no-orchestrator")
    assert r.returncode == 0 and "2 shard server(s), each the writable primary" in r.stdout, r.stdout + r.stderr
    # Nothing created yet: every shard is served by its old server, its instance not provisioned.
    st = status(inv, out)
    assert [(s["served_by"], s["stage"]) for s in st["shards"]] == [("old server", "not provisioned")] * 4
    assert all(i["buffer_pool_mb"] >= 32 for i in doc["instances"])
    # Too little disk: refused, naming the resource.
    tight = state.path / "tight-hosts.yaml"
    tight.write_text(yaml.safe_dump({"hosts": {"h1": {"cores": 2, "memory_gb": 1, "disk_gb": 0.0001}}}))
    r = run_cli("consolidate", "plan", "--inventory", str(inv.path), "--hosts", str(tight), "--sample-s", "0.1")
    assert r.returncode == 1 and "disk: need" in r.stderr and "short by" in r.stderr, r.stderr


def test_instance_per_group_moves_every_shard_loses_nothing_and_rolls_back(legacy):
    state, inv, routes = legacy
    plan_file = state.path / "plan.json"
    assert plan_file.exists(), "the plan test runs first"
    writers = start_writers(inv, routes)
    try:
        outcome = start_run(playbook(state, plan_file, "instance-per-group"), assume_yes=True)
        assert outcome.status == "done", outcome.summary
        with Journal(resolve_journal_path()) as j:
            st = ConsolidateState.load(j.all_state(outcome.run_id)).model_dump()  # typed run state
            steps = j.run_detail(outcome.run_id)["steps"]
        new = st["instances"]
        assert set(new) == {"h1-1", "h1-2"}
        planned = json.loads(plan_file.read_text())["instances"]
        assert new == {i["name"]: f"127.0.0.1:{i['port']}" for i in planned}  # created at the plan's ports
        # One old server per instance, same version, local hosts: seeded physically, from the backup's GTID,
        # and the copy keeps only the instance's shards.
        for key in ("h1-1<-consol-1", "h1-2<-consol-old2"):
            seed = st["seeds"][key]
            assert seed["method"] == "physical" and seed["bytes"] > 1_000_000 and seed["gtid"], seed
            assert "app" in seed["dropped"], seed
        seed_step = next(s for s in steps if s["name"].startswith("seed "))
        assert "copied consol-1 physically to h1-1" in seed_step["sentence"], seed_step["sentence"]
        assert set(st["servers"]) == {"consol-1", "consol-old2"}
        assert all(r["status"] == "done" and r["stage"] == "cutover" for r in st["servers"].values()), st["servers"]
        target = {"shard_1": new["h1-1"], "shard_2": new["h1-1"], "shard_3": new["h1-2"], "shard_4": new["h1-2"]}
        # Routes: each shard to its instance; writes land there.
        for sh in SHARDS:
            assert DsnFileRouter(sh, routes).current().writer == target[sh]
            assert writers[sh].wait_acks_on(target[sh], 30)
        # Every table compared range by range before the fence, and equal.
        for sh in SHARDS:
            sums = st["checksums"][sh]
            assert set(sums["old"]) == {"items", "seq"} and sums["old"] == sums["new"], sums
        cut = next(s["sentence"] for s in steps if s["name"].startswith("cut over"))
        assert "copy verified before the fence" in cut and "app session(s) on consol-1 ended" in cut, cut
        # 0 acknowledged writes lost at the cutover: all on the new instances.
        with inv.open("consol-1") as old1:
            assert Inspector(old1).read_only()
        for inst, shards in (("h1-1", ["shard_1", "shard_2"]), ("h1-2", ["shard_3", "shard_4"])):
            host, _, port = new[inst].rpartition(":")
            from dbmigrate.db.connection import Server

            with Server(inst, host, int(port), inv.credentials_for(inv.cluster(NAME).servers["consol-1"])) as srv:
                assert Inspector(srv).connection_names() == []  # forward connections dropped after the switch
                assert not Inspector(srv).read_only()
                for sh in shards:
                    acked = {i for i, *_ in list(writers[sh].acks)}
                    assert acked <= ids_on(srv, sh), f"{sh}: lost {sorted(acked - ids_on(srv, sh))[:5]}"
        st = status(inv, plan_file)
        assert {(s["shard"], s["served_by"]) for s in st["shards"]} == {(sh, "new instance") for sh in SHARDS}
        assert all(s["stage"].startswith("moved (old server replicating") for s in st["shards"]), st
        assert st["problems"] == []
        # Roll back: routes return to the old servers, after they applied what the instances took.
        back = rollback_run(outcome.run_id, assume_yes=True)
        assert back.status == "rolled_back", back.summary
        for server, shards in OLD.items():
            for sh in shards:
                assert DsnFileRouter(sh, routes).current().writer == address(inv, server)
                assert writers[sh].wait_acks_on(address(inv, server), writers[sh].acked_on(address(inv, server)) + 30)
    finally:
        stop_writers(writers)
    for server, shards in OLD.items():
        with inv.open(server) as srv:
            assert not Inspector(srv).read_only()
            assert Inspector(srv).connection_names() == []  # reverse connections gone
            for sh in shards:
                w = writers[sh]
                acked = {i for i, *_ in w.acks}
                assert w.acked_on(target[sh]) >= 30  # the instance really took writes in between
                missing = acked - ids_on(srv, sh)
                assert not missing, f"{sh}: {len(missing)} acknowledged writes lost, e.g. {sorted(missing)[:5]}"


def test_merge_puts_both_old_servers_into_one_instance_by_multi_source(legacy):
    state, inv, routes = legacy
    shards = measure_shards(inv, sample_s=0.2)
    merged = plan(shards, {"m1": HostSpec(cores=2, memory_gb=1, disk_gb=5, max_instances=1, sandbox=NAME,
                                          base_port=free_base_port(1))},
                  inv.planning, "merge")
    assert [(i.name, i.sources) for i in merged.instances] == [("m1-1", ["consol-1", "consol-old2"])]
    plan_file = state.path / "plan-merge.json"
    plan_file.write_text(json.dumps(merged.to_dict()))
    writers = start_writers(inv, routes)
    try:
        outcome = start_run(playbook(state, plan_file, "merge"), assume_yes=True)
        assert outcome.status == "done", outcome.summary
        with Journal(resolve_journal_path()) as j:
            st = ConsolidateState.load(j.all_state(outcome.run_id)).model_dump()  # typed run state
        m1 = st["instances"]["m1-1"]
        # Two old servers into one instance: a physical copy cannot do that, the logical one does.
        assert {k: v["method"] for k, v in st["seeds"].items()} == {"m1-1<-consol-1": "logical",
                                                                   "m1-1<-consol-old2": "logical"}
        for sh in SHARDS:
            assert DsnFileRouter(sh, routes).current().writer == m1
            assert writers[sh].wait_acks_on(m1, 30)
            assert st["checksums"][sh]["old"] == st["checksums"][sh]["new"]
    finally:
        stop_writers(writers)
    host, _, port = m1.rpartition(":")
    from dbmigrate.db.connection import Server

    with Server("m1-1", host, int(port), inv.credentials_for(inv.cluster(NAME).servers["consol-1"])) as srv:
        assert str(Inspector(srv).variable("gtid_strict_mode")) in ("0", "OFF")
        for sh in SHARDS:
            acked = {i for i, *_ in writers[sh].acks}
            missing = acked - ids_on(srv, sh)
            assert not missing, f"{sh}: {len(missing)} acknowledged writes lost"
