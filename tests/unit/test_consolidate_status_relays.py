"""`consolidate status` for shards that route through relays of their own (the cluster's
`shard_routers`): who serves such a shard is where its relay sends writes now (its backend, read on
its control socket, tests/unit/fake_relay.py), not the DSN file, which the consolidation no longer
changes for it; a shard without a relay still reads the DSN file; a relay that does not answer (or
is not running) is a problem line of its shard, not the end of the status."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from dbmigrate.app.consolidate import status as app_status
from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.procedures.consolidate.demand import Demand, ShardDemand
from dbmigrate.procedures.consolidate.model import ConsolidationPlan, PlannedInstance
from dbmigrate.procedures.consolidate.status import Probe
from tests.unit.fake_relay import FakeRelay

OLD, INST = "old-a", "h1-1"
OLD_ADDR, INST_ADDR = "127.0.0.1:3306", "127.0.0.1:3401"
SHARDS = ["s_relayed", "s_dsn"]


def running() -> ReplicaStatus:
    return ReplicaStatus("h", 3306, "Yes", "Yes", 0, "", "", "No")


def world(tmp_path: Path, monkeypatch, relay: FakeRelay | None, *, moved: bool) -> tuple[Path, Path]:
    """An old server with two shards, both planned onto one instance: s_relayed behind `relay`
    (or behind a control socket nobody listens on), s_dsn in the DSN file, which still names the
    old server for both. `moved`: the instance writable, the old server fenced and replicating
    back from it."""
    plan = ConsolidationPlan("instance-per-group", {}, [ShardDemand(s, OLD, 1, 1, 0.0) for s in SHARDS],
                             [PlannedInstance(INST, "h1", "127.0.0.1", 3401, "/d", list(SHARDS), [OLD], Demand(),
                                              0.0, shard_sources={s: OLD for s in SHARDS})], [])
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan.to_dict()))
    control = relay.path if relay is not None else str(tmp_path / "nobody.sock")
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({
        "defaults": {"credentials": {"user": "admin", "password_env": "RCONS_TEST_PASSWORD"}, "connect_timeout": 1},
        "clusters": {"legacy": {
            "servers": {OLD: {"host": "127.0.0.1", "port": 3306, "shards": list(SHARDS)}},
            "router": {"kind": "dsn-file", "path": "shards.json"},
            "shard_routers": {"s_relayed": {"kind": "relay", "address": "127.0.0.1:6101",
                                            "control_socket": control}}}}}))
    (tmp_path / "shards.json").write_text(json.dumps({"clusters": {s: {"writer": OLD_ADDR} for s in SHARDS}}))

    def probe(server) -> Probe:
        if server.name == INST:
            return Probe(INST, INST_ADDR, read_only=not moved, schemas=set(SHARDS),
                         connections={} if moved else {"old_a": running()})
        return Probe(OLD, OLD_ADDR, read_only=moved, schemas=set(SHARDS),
                     connections={"h1_1": running()} if moved else {})

    monkeypatch.setattr(app_status, "_probe", probe)
    monkeypatch.setenv("RCONS_TEST_PASSWORD", "status-fake-unused-9d1")  # never used: no server is reached
    return plan_file, inv


def by_shard(result) -> dict:
    return {s.shard: s for s in result.shards}


def test_a_relayed_shard_is_served_where_its_relay_sends_writes_not_where_the_dsn_file_says(tmp_path, monkeypatch):
    relay = FakeRelay(tmp_path / "relay.sock", INST_ADDR)  # moved: the relay's backend is the instance
    try:
        plan_file, inv = world(tmp_path, monkeypatch, relay, moved=True)
        result = app_status.consolidation_status(plan_file, inv)
    finally:
        relay.close()
    s = by_shard(result)
    assert s["s_relayed"].served_by == "new instance", s["s_relayed"]
    assert s["s_relayed"].stage.startswith("moved (old server replicating"), s["s_relayed"]
    assert s["s_relayed"].problems == []
    assert relay.lines and all(line == "status" for line in relay.lines)  # read, never changed
    # The DSN file's shard still names the old server, fenced: that is a problem of its own.
    assert s["s_dsn"].served_by == "old server"
    assert any("read-only" in p for p in s["s_dsn"].problems), s["s_dsn"]
    assert result.to_dict()["relays"] == {"s_relayed": "127.0.0.1:6101"}


def test_before_the_move_the_relay_names_the_old_server(tmp_path, monkeypatch):
    relay = FakeRelay(tmp_path / "relay.sock", OLD_ADDR)
    try:
        plan_file, inv = world(tmp_path, monkeypatch, relay, moved=False)
        result = app_status.consolidation_status(plan_file, inv)
    finally:
        relay.close()
    assert result.problems == []
    assert {s.shard: (s.served_by, s.stage) for s in result.shards} == {
        "s_relayed": ("old server", "seeded, replicating, 0s behind"),
        "s_dsn": ("old server", "seeded, replicating, 0s behind")}


def test_a_relay_that_does_not_answer_is_a_problem_line_not_a_crash(tmp_path, monkeypatch):
    plan_file, inv = world(tmp_path, monkeypatch, None, moved=False)  # nothing listens on its control socket
    result = app_status.consolidation_status(plan_file, inv)
    s = by_shard(result)
    assert s["s_relayed"].served_by == "unknown (route not read)"
    assert len(result.problems) == 1 and result.problems[0].startswith(
        "s_relayed: its relay at 127.0.0.1:6101 does not answer: relay control socket"), result.problems
    assert s["s_dsn"].served_by == "old server" and s["s_dsn"].problems == []

    frozen = FakeRelay(tmp_path / "frozen.sock", OLD_ADDR)
    frozen.mute = True  # reads the line, never answers
    try:
        plan_file, inv = world(tmp_path, monkeypatch, frozen, moved=False)
        result = app_status.consolidation_status(plan_file, inv)
    finally:
        frozen.close()
    assert len(result.problems) == 1 and "frozen.sock" in result.problems[0], result.problems
    assert by_shard(result)["s_relayed"].served_by == "unknown (route not read)"
