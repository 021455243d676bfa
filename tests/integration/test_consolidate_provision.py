"""`dbmigrate consolidate provision` through a real ansible-playbook run on this machine.

A plan from a sizes file puts two instances on one host at 127.0.0.1 (datadirs, run
dir and option-group files under a temp dir, ports from a free range). The generated
playbook runs with `connection=local` and `dbmigrate_start: direct` (no systemd here):
it creates and starts both instances, which then answer SQL at the plan's ports with
the plan's server ids and the inventory's accounts. A second run changes nothing.
Every mariadbd it started is stopped at the end.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import DbmigrateError

from tests import jsonlines
from tests.conftest import run_cli

pytestmark = pytest.mark.integration


def free_base_port(n: int) -> int:
    from dbmigrate.rehearsal.sandbox.ports import free_port_range

    return free_port_range(n)


def stop_instances(run_dir: Path) -> None:
    pids = []
    for pid_file in run_dir.glob("*.pid"):
        try:
            pid = int(pid_file.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            pids.append(pid)
        except (ValueError, OSError):
            continue
    deadline = time.monotonic() + 60
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def fleet(tmp_path, demo_inventory):
    """A plan of two instances on this machine, the inventory giving their accounts."""
    work = tmp_path / "prov"
    work.mkdir()
    (work / "sizes.csv").write_text("server,shard,bytes,working_set,qps\n"
                                    "old-a,pa_1,20M,2M,5\nold-a,pa_2,10M,1M,5\nold-b,pb_1,15M,2M,5\n")
    (work / "hosts.yaml").write_text(yaml.safe_dump({
        "hosts": {"p1": {"cores": 2, "memory_gb": 1, "disk_gb": 5, "max_instances": 2, "address": "127.0.0.1",
                         "base_port": free_base_port(2), "datadir_root": str(work / "data"),
                         "run_dir": str(work / "run")}},
        "planning": {"reserved_memory_gb": 0.25, "instance_overhead_mb": 64, "min_buffer_pool_mb": 32}}))
    r = run_cli("consolidate", "plan", "--sizes", str(work / "sizes.csv"), "--hosts", str(work / "hosts.yaml"),
                "--out", str(work / "plan.json"))
    assert r.returncode == 0, r.stderr
    yield work, demo_inventory
    stop_instances(work / "run")


def provision_args(work: Path, inventory) -> list[str]:
    return ["consolidate", "provision", "--plan", str(work / "plan.json"), "--inventory", str(inventory.path),
            "--cluster", "shared", "--start", "direct", "--mariadbd-user", "root", "--no-packages",
            "--conf-dir", str(work / "etc"), "--json"]


def test_provision_creates_and_starts_instances_at_the_plans_ports_and_is_idempotent(fleet):
    work, inv = fleet
    plan = json.loads((work / "plan.json").read_text())
    assert [i["name"] for i in plan["instances"]] == ["p1-1", "p1-2"]

    # --dry-run: the files, nothing written, nothing started.
    r = run_cli(*provision_args(work, inv)[:-1], "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "[mariadbd.p1-1]" in r.stdout and "dbmigrate_start: direct" in r.stdout
    assert not (work / "plan-provision").exists() and not (work / "data").exists()

    r = run_cli(*provision_args(work, inv), timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout
    first = jsonlines.result(r.stdout)
    assert first["recap"]["p1"]["changed"] > 0 and first["recap"]["p1"]["failed"] == 0
    admin = inv.credentials_for(next(iter(inv.cluster("shared").servers.values())))
    repl = inv.replication_credentials("shared")
    for planned in plan["instances"]:
        # It answers SQL at the plan's port, as the plan's server, read-only until its cutover.
        with Server(planned["name"], "127.0.0.1", planned["port"], admin) as srv:
            insp = Inspector(srv)
            assert int(insp.variable("port")) == planned["port"]
            assert int(insp.variable("server_id")) == planned["server_id"]
            assert insp.read_only()
            assert insp.user_exists(repl.user)
            assert str(insp.variable("log_bin")) in ("1", "ON")
            assert str(insp.variable("innodb_buffer_pool_size")) == str(planned["buffer_pool_mb"] * 1024 * 1024)
            assert Inspector(srv).gtid_binlog_pos() == ""  # the accounts were not binlogged
        with Server("repl", "127.0.0.1", planned["port"], repl) as srv:
            srv.scalar("SELECT 1")
    # No secret in what was written; the run's vars file is gone.
    for name in ("inventory.yml", "provision.yml", "ansible.cfg"):
        text = (work / "plan-provision" / name).read_text()
        assert admin.password not in text and repl.password not in text
    assert oct((work / "plan-provision").stat().st_mode & 0o777) == "0o700"

    r = run_cli(*provision_args(work, inv), timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout
    again = jsonlines.result(r.stdout)
    assert again["recap"]["p1"]["changed"] == 0 and again["recap"]["p1"]["failed"] == 0
    assert [i["answered"] for i in again["instances"]] == [True, True]

    # Physical seeding stops and starts such an instance through the host layer: it is found
    # running directly (no systemd here), stopped cleanly, and started again as it ran.
    from dbmigrate.hosts import LocalHost
    from dbmigrate.procedures.consolidate.provision import HostControl, instance_control, pid_file
    from dbmigrate.procedures.consolidate.resources import load_plan

    inst = load_plan(work / "plan.json").instance("p1-1")
    control = instance_control(inst, LocalHost("p1"))
    assert isinstance(control, HostControl) and control.how() == "direct"
    assert control.datadir(inst) == inst.datadir
    before = control.service.live_pid()
    control.stop(inst)
    assert control.service.live_pid() is None and not Path(pid_file(inst)).exists()
    with pytest.raises(DbmigrateError):  # it really is down
        Server("p1-1", "127.0.0.1", inst.port, admin, retries=0).scalar("SELECT 1")
    assert control.start(inst) == f"127.0.0.1:{inst.port}"
    after = control.service.live_pid()
    assert after and after != before
    with Server("p1-1", "127.0.0.1", inst.port, admin) as srv:
        assert int(Inspector(srv).variable("server_id")) == inst.server_id and Inspector(srv).read_only()


def test_a_plan_without_ports_schema_or_with_an_unreachable_host_is_refused_with_exit_2(fleet):
    work, inv = fleet
    old = json.loads((work / "plan.json").read_text())
    for i in old["instances"]:
        i.pop("socket"), i.pop("server_id")
    (work / "v1.json").write_text(json.dumps(old))
    r = run_cli("consolidate", "provision", "--plan", str(work / "v1.json"), "--inventory", str(inv.path),
                "--cluster", "shared", "--dry-run")
    assert r.returncode == 2 and "a version 1 plan" in r.stderr, r.stderr
    remote = json.loads((work / "plan.json").read_text())
    for i in remote["instances"]:
        i["address"] = "db-new-1.example"
    (work / "remote.json").write_text(json.dumps(remote))
    r = run_cli("consolidate", "provision", "--plan", str(work / "remote.json"), "--inventory", str(inv.path),
                "--cluster", "shared", "--dry-run")
    assert r.returncode == 2 and "host p1 (db-new-1.example): no access declared" in r.stderr, r.stderr
    assert not (work / "run").exists()  # nothing was started by either
