"""`topology show` against real sandboxes: the shared healthy 1+2, then a repointed chain of our own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.topology.discovery import discover
from dbmigrate.topology.find import discover_inventory
from tests import jsonlines

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dbmigrate", *args], cwd=ROOT, env=os.environ.copy(),
                          capture_output=True, text=True, timeout=60)


def addr(state, name: str) -> str:
    return f"127.0.0.1:{state.instances[name].port}"


def test_show_draws_the_shared_tree_and_json(demo):
    inv = str(demo.inventory_file)
    r = cli("topology", "show", "--inventory", inv, "--cluster", "shared")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())  # rich wraps long lines
    for name, role in (("shared-1", "primary"), ("shared-2", "replica"), ("shared-3", "replica")):
        assert f"{addr(demo, name)} ({name}) [{role}," in text
    assert "rw, GTID, ROW" in text and "ro, Slave_Pos, ROW" in text

    r = cli("topology", "show", "--inventory", inv, "--cluster", "shared", "--json")
    doc = jsonlines.result(r.stdout)
    assert doc["primary"] == addr(demo, "shared-1") and doc["problems"] == []
    by = {n["address"]: n for n in doc["nodes"]}
    assert set(by) == {addr(demo, f"shared-{i}") for i in (1, 2, 3)}
    p = by[addr(demo, "shared-1")]
    assert p["role"] == "primary" and p["read_only"] is False and p["binlog_format"] == "ROW"
    assert sorted(p["replicas"]) == sorted([addr(demo, "shared-2"), addr(demo, "shared-3")])
    r2 = by[addr(demo, "shared-2")]
    assert r2["source"] == p["address"] and r2["io_running"] == "Yes" and r2["behind"] == {"0": 0}


def test_seed_crawl_from_a_replica_finds_the_whole_cluster(demo, demo_inventory):
    with demo_inventory.open("shared-3") as seed:
        c = discover(seed)
        try:
            assert c.primary.address == addr(demo, "shared-1")
            assert {n.address for n in c.replicas} == {addr(demo, "shared-2"), addr(demo, "shared-3")}
        finally:
            c.close()


@pytest.fixture(scope="module")
def chain(boxes, make_sandbox):
    state = make_sandbox("topochain", 2)
    yield state
    boxes.down("topochain")


def test_manual_repoint_shows_three_under_two(chain):
    inv = load_inventory(chain.inventory_file)
    repl = inv.replication_credentials("topochain")
    with inv.open("topochain-3") as r3:
        r3.execute("STOP SLAVE")
        r3.execute("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s, "
                   "MASTER_USE_GTID=slave_pos", (chain.instances["topochain-2"].port, repl.user, repl.password))
        r3.execute("START SLAVE")
    with discover_inventory(inv, "topochain") as c:
        assert c.node("topochain-3").source == addr(chain, "topochain-2")
    r = cli("topology", "show", "-i", str(chain.inventory_file), "-c", "topochain", "--json")
    by = {n["name"]: n for n in jsonlines.result(r.stdout)["nodes"]}
    assert by["topochain-2"]["role"] == "intermediate"
    assert by["topochain-2"]["replicas"] == [addr(chain, "topochain-3")]
    assert by["topochain-1"]["replicas"] == [addr(chain, "topochain-2")]
    assert by["topochain-3"]["source"] == addr(chain, "topochain-2")

    lines = cli("topology", "show", "-i", str(chain.inventory_file), "-c", "topochain").stdout.splitlines()
    depth = {name: next(line.index(addr(chain, name)) for line in lines if addr(chain, name) in line)
             for name in ("topochain-1", "topochain-2", "topochain-3")}
    assert depth["topochain-1"] < depth["topochain-2"] < depth["topochain-3"]
