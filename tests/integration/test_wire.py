"""`topology wire` turns empty servers (as docker compose starts them) into a replicating
cluster from the inventory alone, without errant GTIDs, and is idempotent."""

from __future__ import annotations


import pytest
import yaml

from dbmigrate.config import load_inventory
from dbmigrate.db.inspector import Inspector
from dbmigrate.rehearsal.sandbox.accounts import read_option_file

pytestmark = pytest.mark.integration


def test_wire_fresh_servers_into_a_cluster(boxes, cli, tmp_path):
    boxes.up("wirebase", 0)
    for n in ("w1", "w2", "w3"):
        boxes.add_instance("wirebase", n)  # standalone, writable, accounts without binlog
    state = boxes.find("wirebase")
    admin = read_option_file(state.credentials_file)["admin"]
    creds = tmp_path / "ci.cnf"
    creds.write_text(state.credentials_file.read_text() + "\n[client-ci-app]\nuser=ci_app\npassword=\"ci-app-pw-123\"\n")
    inv_path = tmp_path / "compose-like.yaml"
    inv_path.write_text(yaml.safe_dump({
        "defaults": {"credentials": {"defaults_file": str(creds), "group": "client-admin"}},
        "clusters": {"ci": {
            "replication_credentials": {"defaults_file": str(creds), "group": "client-repl"},
            "app_credentials": {"defaults_file": str(creds), "group": "client-ci-app"},
            "servers": {n: {"host": "127.0.0.1", "port": state.instances[n].port,
                            "role": "primary" if n == "w1" else "replica"} for n in ("w1", "w2", "w3")}}}}))
    env = {"DBMIGRATE_ROOT_PASSWORD": admin.password}
    r = cli("topology", "wire", "-i", str(inv_path), "-c", "ci", "--root-user", admin.user, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "w2 replicates from w1" in r.stdout and "ci_app@w1" in r.stdout
    assert admin.password not in r.stdout + r.stderr

    inv = load_inventory(inv_path)
    with inv.open("w1") as p:
        p.execute("CREATE TABLE app.t_wire (id INT PRIMARY KEY)")
        p.execute("INSERT INTO app.t_wire VALUES (1)")
        pos = Inspector(p).gtid_binlog_pos()
        primary_state = Inspector(p).gtid_state()
    for n in ("w2", "w3"):
        with inv.open(n) as s:
            insp = Inspector(s)
            assert insp.wait_for_gtid(pos, 10)
            assert insp.read_only()
            assert s.scalar("SELECT COUNT(*) FROM app.t_wire") == 1
            assert s.flavor.errant(insp.gtid_state(), primary_state) == []
            assert insp.user_exists("ci_app")
    r = cli("check", "-i", str(inv_path), "-c", "ci", "--candidate", "w2", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    r = cli("topology", "wire", "-i", str(inv_path), "-c", "ci", "--root-user", admin.user, env=env)
    assert r.returncode == 0 and "already in place" in r.stdout
    boxes.down("wirebase")


def test_wire_needs_one_primary(cli, tmp_path):
    (tmp_path / "c.cnf").write_text("[client]\nuser=u\npassword=p\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text("defaults:\n  credentials: {defaults_file: c.cnf, group: client}\nclusters:\n  c:\n"
                   "    replication_credentials: {defaults_file: c.cnf, group: client}\n"
                   "    servers:\n      a: {host: 127.0.0.1, port: 1, role: replica}\n")
    r = cli("topology", "wire", "-i", str(inv), "-c", "c", env={"DBMIGRATE_ROOT_PASSWORD": "x"})
    assert r.returncode == 2 and "exactly one server with role: primary" in r.stderr
