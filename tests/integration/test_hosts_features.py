"""Features that touch a server's files, run where the tool can reach them
only over ssh: the sandbox directory is hidden from the tool's process (a
mount namespace with an empty tmpfs on top), while sshd, outside it, still
sees the instances' files. Any leftover direct file access fails here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import mysql.connector
import pytest
import yaml

from dbmigrate.config import load_inventory
from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.procedures.kit.preflight_checks import disk_gate
from dbmigrate.hosts import SshHost, host_for
from dbmigrate.rehearsal.sandbox.instance import pid_alive
from tests import jsonlines

pytestmark = pytest.mark.integration

BOX = "hostsbox"
TARGET = f"{BOX}-t"
COLD = {"innodb_flush_method": "O_DIRECT", "innodb_buffer_pool_load_at_startup": "OFF",
        "innodb_buffer_pool_dump_at_shutdown": "OFF"}
ROWS = 60_000
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def box(make_sandbox, boxes):
    make_sandbox(BOX, replicas=0)
    boxes.add_instance(BOX, TARGET, replica_of=f"{BOX}-1", extra=COLD)
    inv = load_inventory(boxes.find(BOX).inventory_file)
    with inv.open(f"{BOX}-1") as primary, inv.open(TARGET) as target:
        primary.execute("CREATE TABLE app.t1 (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, KEY k (k))")
        primary.execute(f"INSERT INTO app.t1 SELECT seq, FLOOR(RAND(7) * {ROWS}), REPEAT(CHAR(65 + seq % 26), 120) "
                        f"FROM app.seq_1_to_{ROWS}")
        assert Inspector(target).wait_for_gtid(Inspector(primary).gtid_binlog_pos(), 60)
    yield boxes.find(BOX)
    boxes.down(BOX)


@pytest.fixture(scope="module")
def remote_inventory(box, sshd, dbm_home) -> Path:
    """The sandbox's inventory, every server's host reached through sshd, kept outside the sandbox directory."""
    ops = dbm_home / "ops"
    ops.mkdir(exist_ok=True)
    doc = yaml.safe_load(box.inventory_file.read_text())
    for cluster in doc["clusters"].values():
        for server in cluster["servers"].values():
            server["access"] = sshd.endpoint.access()
    shutil.copy2(box.inventory_file.parent / "credentials.cnf", ops / "credentials.cnf")
    path = ops / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def hidden_run(box, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """`dbmigrate ARGS` with the sandbox directory hidden under an empty tmpfs."""
    cmd = " ".join(map(_q, [sys.executable, "-m", "dbmigrate", *args]))
    script = f"mount -t tmpfs dbm-hidden {_q(str(box.path))} && test -z \"$(ls -A {_q(str(box.path))})\" && exec {cmd}"
    return subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, COLUMNS="200"))


def _q(s: str) -> str:
    import shlex
    return shlex.quote(s)


@pytest.fixture(scope="module")
def can_hide(box):
    r = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs x {_q(str(box.path))}"], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"mount namespaces are not available here ({r.stderr.decode().strip()})")


def test_disk_gate_measures_the_datadir_over_ssh(remote_inventory, box):
    inv = load_inventory(remote_inventory)
    host = host_for(inv, TARGET)
    assert isinstance(host, SshHost)
    datadir = inv.find_server(TARGET)[1].datadir
    result = disk_gate(host, datadir, 1)
    st = os.statvfs(datadir)
    assert result.ok and result.details["host"] == host.name
    assert abs(result.details["free_mb"] - st.f_bavail * st.f_frsize // 2**20) < 64
    assert not disk_gate(host, datadir, 2**60).ok
    host.close()


def test_check_reports_free_space_with_the_sandbox_hidden(remote_inventory, box, can_hide):
    r = hidden_run(box, "check", "--inventory", str(remote_inventory), "--cluster", BOX, "--candidate", TARGET,
                   "--json")
    doc = jsonlines.result(r.stdout)
    disk = next(g for g in doc["gates"] if g["name"] == "disk")
    assert disk["ok"] and "MiB free" in disk["reason"], disk
    print("\n" + disk["reason"])


def test_dump_load_over_ssh_with_the_sandbox_hidden(remote_inventory, box, boxes, can_hide):
    boxes.stop_instance(BOX, TARGET)
    boxes.start_instance(BOX, TARGET)  # cold: nothing loaded at startup
    r = hidden_run(box, "warm", "--inventory", str(remote_inventory), "--target", TARGET, "--from", f"{BOX}-1",
                   "--method", "dump-load", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    rec = jsonlines.result(r.stdout)
    assert rec["method"] == "dump-load"
    assert rec["details"]["pages_loaded"] > 300
    assert rec["hit_ratio_after"]["ratio"] > rec["hit_ratio_before"]["ratio"]
    print(f"\nhit ratio {rec['hit_ratio_before']['ratio']:.3f} -> {rec['hit_ratio_after']['ratio']:.3f}, "
          f"{rec['details']['pages_loaded']} pages loaded over ssh")


def test_without_the_layer_the_hidden_sandbox_is_out_of_reach(box, can_hide):
    """The control: the sandbox's own (local) inventory cannot warm anything with its directory hidden."""
    ops = box.inventory_file.parent.parent / "ops-local"
    ops.mkdir(exist_ok=True)
    shutil.copy2(box.inventory_file, ops / "inventory.yaml")
    shutil.copy2(box.inventory_file.parent / "credentials.cnf", ops / "credentials.cnf")
    r = hidden_run(box, "warm", "--inventory", str(ops / "inventory.yaml"), "--target", TARGET, "--from",
                   f"{BOX}-1", "--method", "dump-load", "--json")
    assert r.returncode != 0 and "ib_buffer_pool" in r.stderr, r.stdout + r.stderr
    shutil.rmtree(ops, ignore_errors=True)


def test_digest_capture_over_ssh_with_the_sandbox_hidden(remote_inventory, box, dbm_home, can_hide):
    inv = load_inventory(box.inventory_file)
    stop = threading.Event()

    def traffic():
        with inv.open(f"{BOX}-1") as primary:
            while float(Inspector(primary).slow_log_settings()["long_query_time"]) > 0 and not stop.is_set():
                time.sleep(0.05)
        spec = inv.find_server(f"{BOX}-1")[1]
        creds = inv.credentials_for(spec)
        # The application's own, untagged statements, on a session opened once the window is.
        conn = mysql.connector.connect(host=spec.host, port=spec.port, user=creds.user, password=creds.password,
                                       use_pure=True, ssl_disabled=True, autocommit=True)
        cur = conn.cursor()
        while not stop.is_set():
            cur.execute("SELECT c FROM app.t1 WHERE id = %s", (7,))
            cur.fetchall()
            time.sleep(0.005)
        conn.close()

    t = threading.Thread(target=traffic, daemon=True)
    out = dbm_home / "ops" / "capture.digest.json"
    t.start()
    try:
        r = hidden_run(box, "digest", "capture", "-i", str(remote_inventory), "-s", f"{BOX}-1", "--seconds", "3",
                       "--out", str(out), "--json")
    finally:
        stop.set()
        t.join(10)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = jsonlines.result(r.stdout)
    assert any(c["fingerprint"].startswith("select c from app.t") for c in doc["classes"]), doc
    with inv.open(f"{BOX}-1") as primary:
        v = Inspector(primary).slow_log_settings()
        assert float(v["long_query_time"]) > 0  # restored
    datadir = Path(inv.find_server(f"{BOX}-1")[1].datadir)
    leftovers = [p for p in datadir.parent.rglob("dbmigrate-digest-*")]
    assert leftovers == [], leftovers  # the window's file was removed from the host


def test_sandbox_up_with_ssh_gives_each_instance_a_host_of_its_own(cli, boxes):
    r = cli("sandbox", "up", "--name", "sshbox", "--replicas", "1", "--ssh", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        doc = jsonlines.result(r.stdout)
        assert set(doc["ssh"]) == {"sshbox-1", "sshbox-2"}
        pids = [rec["pid"] for rec in doc["ssh"].values()]
        inv = load_inventory(doc["inventory"])
        ports = set()
        for name in ("sshbox-1", "sshbox-2"):
            host = host_for(inv, name)
            assert isinstance(host, SshHost)
            ports.add(host.settings.port)
            datadir = inv.find_server(name)[1].datadir
            assert host.exists(f"{datadir}/ibdata1")
            host.close()
        assert len(ports) == 2
    finally:
        down = cli("sandbox", "down", "sshbox")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not [p for p in pids if pid_alive(p)]  # (an unreaped zombie counts as stopped)


def guarded_promote(box, inventory: Path, ops: Path) -> tuple[str, dict[str, str]]:
    """A promote with the latency guard, run hidden from the sandbox under read traffic on both
    servers; returns (run id, each step's sentence). The caller rolls it back."""
    inv = load_inventory(box.inventory_file)
    playbook = ops / "promote-guarded.yaml"
    playbook.write_text(yaml.safe_dump({
        "procedure": "promote", "inventory": str(inventory), "cluster": BOX,
        "params": {"candidate": TARGET, "baseline_seconds": 2, "guard_sample_s": 2, "lag_wait_s": 10},
        "guard": {"window_s": 4, "min_samples": 1, "min_class_samples": 1,
                  "rules": [{"metric": "avg", "scope": "overall", "max_regression_pct": 100000}]},
    }, sort_keys=False))
    stop = threading.Event()

    app = inv.app_credentials(BOX)
    assert app is not None

    def traffic():
        # The application's account (the guard never counts the tool's own), and a new session
        # per query: sessions copy long_query_time when they connect.
        while not stop.is_set():
            for name in (f"{BOX}-1", TARGET):
                spec = inv.cluster(BOX).servers[name]
                try:
                    with Server(name, spec.host, spec.port, app) as server:
                        server.query("SELECT COUNT(*) AS n FROM app.t1 WHERE k < 100")
                except Exception:
                    pass
            time.sleep(0.02)

    t = threading.Thread(target=traffic, daemon=True)
    t.start()
    try:
        r = hidden_run(box, "run", str(playbook), "--yes", "--json", timeout=300)
    finally:
        stop.set()
        t.join(10)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    run_id = next(e["run_id"] for e in events if e.get("run_id"))
    said = {e.get("name"): e.get("sentence", "") for e in events if e.get("event") == "StepFinished"}
    assert "guard watched" in said.get("latency guard", ""), said
    return run_id, said


def roll_back_hidden(box, run_id: str) -> None:
    inv = load_inventory(box.inventory_file)
    back = hidden_run(box, "rollback", run_id, "--yes", timeout=300)
    assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
    with inv.open(f"{BOX}-1") as primary, inv.open(TARGET) as target:
        assert not Inspector(primary).read_only() and Inspector(target).read_only()


def test_promote_with_the_latency_guard_over_ssh_with_the_sandbox_hidden(remote_inventory, box, dbm_home, can_hide):
    """The guard's baseline on the old primary and its windows on the new one are slow logs on
    other hosts: they are fetched over ssh, digested here and removed there. Rolled back at the end."""
    inv = load_inventory(box.inventory_file)
    run_id, said = guarded_promote(box, remote_inventory, dbm_home / "ops")
    assert "baseline:" in said.get("collect baseline digest", ""), said
    digests = sorted(p.name for p in (dbm_home / "digests" / run_id).glob("*.digest.json"))
    # The guard judges each sample as it arrives and digests its whole window once.
    assert "baseline.digest.json" in digests and "guard.digest.json" in digests, digests
    for name in (f"{BOX}-1", TARGET):
        with inv.open(name) as server:
            assert float(Inspector(server).slow_log_settings()["long_query_time"]) > 0  # restored
    roll_back_hidden(box, run_id)
    datadirs = [Path(inv.find_server(n)[1].datadir).parent for n in (f"{BOX}-1", TARGET)]
    leftovers = [str(p) for d in datadirs for p in d.rglob("dbmigrate-digest-*")]
    assert leftovers == [], leftovers  # every window file was removed from its host


# -- hosts the tool may not enter: slow-log windows over SQL ---------------------------

@pytest.fixture(scope="module")
def table_inventory(box, dbm_home) -> Path:
    """Every host declared `access: none` (a managed service), slow-log windows read from the table."""
    ops = dbm_home / "ops-sql"
    ops.mkdir(exist_ok=True)
    doc = yaml.safe_load(box.inventory_file.read_text())
    for cluster in doc["clusters"].values():
        for server in cluster["servers"].values():
            server["access"] = {"kind": "none", "slow_log": "table"}
    shutil.copy2(box.inventory_file.parent / "credentials.cnf", ops / "credentials.cnf")
    path = ops / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _slow_log_rows(inv, name: str) -> int:
    with inv.open(name) as server:
        return int(server.scalar("SELECT COUNT(*) FROM mysql.slow_log"))


def test_digest_capture_over_sql_alone_with_the_sandbox_hidden(table_inventory, box, dbm_home, can_hide):
    inv = load_inventory(box.inventory_file)
    stop = threading.Event()

    spec = inv.find_server(f"{BOX}-1")[1]
    creds = inv.credentials_for(spec)

    def traffic():
        while not stop.is_set():  # the application's own statements, a session per query (each
            try:                  # copies long_query_time when it connects)
                conn = mysql.connector.connect(host=spec.host, port=spec.port, user=creds.user,
                                               password=creds.password, use_pure=True, ssl_disabled=True)
                cur = conn.cursor()
                cur.execute("SELECT c FROM app.t1 WHERE id = 11")
                cur.fetchall()
                conn.close()
            except mysql.connector.Error:
                pass
            time.sleep(0.01)

    t = threading.Thread(target=traffic, daemon=True)
    out = dbm_home / "ops-sql" / "capture.digest.json"
    t.start()
    try:
        r = hidden_run(box, "digest", "capture", "-i", str(table_inventory), "-s", f"{BOX}-1", "--seconds", "3",
                       "--out", str(out), "--json")
    finally:
        stop.set()
        t.join(10)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = jsonlines.result(r.stdout)
    cls = next((c for c in doc["classes"] if c["fingerprint"].startswith("select c from app.t")), doc)
    assert isinstance(cls, dict) and cls.get("count", 0) >= 20, cls
    assert doc["source"]["slow_log"] == "mysql.slow_log"
    with inv.open(f"{BOX}-1") as primary:
        v = Inspector(primary).slow_log_settings()
        assert float(v["long_query_time"]) > 0 and str(v["log_output"]).upper() == "FILE", v  # restored
    assert _slow_log_rows(inv, f"{BOX}-1") == 0  # the table held only the window's rows: emptied
    assert not list(out.parent.glob("*.slow.log"))  # the rebuilt log is not kept beside the digest


def test_access_none_without_the_table_says_what_to_declare(box, dbm_home):
    ops = dbm_home / "ops-none"
    ops.mkdir(exist_ok=True)
    doc = yaml.safe_load(box.inventory_file.read_text())
    for cluster in doc["clusters"].values():
        for server in cluster["servers"].values():
            server["access"] = "none"
    shutil.copy2(box.inventory_file.parent / "credentials.cnf", ops / "credentials.cnf")
    (ops / "inventory.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    r = subprocess.run([sys.executable, "-m", "dbmigrate", "digest", "capture", "-i", str(ops / "inventory.yaml"),
                        "-s", f"{BOX}-1", "--seconds", "1", "--out", str(ops / "x.digest.json")],
                       cwd=REPO, capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert "access: none" in r.stderr and "slow_log: table" in r.stderr, r.stderr
    inv = load_inventory(box.inventory_file)
    with inv.open(f"{BOX}-1") as primary:
        assert float(Inspector(primary).slow_log_settings()["long_query_time"]) > 0  # restored all the same


def test_promote_with_the_latency_guard_over_sql_alone_with_the_sandbox_hidden(table_inventory, box, dbm_home,
                                                                              can_hide):
    """No access to any host: the baseline and the guard's windows are read from mysql.slow_log."""
    inv = load_inventory(box.inventory_file)
    run_id, said = guarded_promote(box, table_inventory, dbm_home / "ops-sql")
    assert "mysql.slow_log" in said.get("open baseline window on the old primary", ""), said
    base = said.get("collect baseline digest", "")
    assert "baseline:" in base and not base.startswith("baseline: 0 queries"), said
    guard_digests = sorted((dbm_home / "digests" / run_id).glob("guard.digest.json"))
    assert guard_digests and any(json.loads(p.read_text())["query_count"] > 0 for p in guard_digests)
    for name in (f"{BOX}-1", TARGET):
        with inv.open(name) as server:
            v = Inspector(server).slow_log_settings()
            assert float(v["long_query_time"]) > 0 and str(v["log_output"]).upper() == "FILE", v
        assert _slow_log_rows(inv, name) == 0
    roll_back_hidden(box, run_id)
