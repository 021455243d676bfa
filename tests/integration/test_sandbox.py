"""The sandbox: real MariaDB processes, replication, accounts, inventory, teardown."""

from __future__ import annotations

import time

import pytest

from dbmigrate.db.connection import QueryError, Server
from dbmigrate.rehearsal.sandbox.instance import pid_alive
from tests import jsonlines

pytestmark = pytest.mark.integration


def _wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_row_written_on_primary_reaches_both_replicas(demo, demo_inventory):
    inv = demo_inventory
    with inv.open("shared-1") as p:
        p.execute("CREATE TABLE IF NOT EXISTS app.t_sandbox (id INT PRIMARY KEY, v VARCHAR(20))")
        p.execute("REPLACE INTO app.t_sandbox VALUES (1, 'hello')")
    for name in ("shared-2", "shared-3"):
        with inv.open(name) as r:
            assert _wait(lambda: r.scalar("SELECT v FROM app.t_sandbox WHERE id=1") == "hello"), name


def test_app_user_is_fenced_by_read_only(demo, demo_inventory):
    inv = demo_inventory
    app = inv.app_credentials("shared")
    spec = inv.cluster("shared").servers["shared-2"]
    replica_as_app = Server("shared-2", spec.host, spec.port, app)
    with replica_as_app:
        with pytest.raises(QueryError) as ei:
            replica_as_app.execute("CREATE TABLE app.t_should_fail (id INT)")
        assert ei.value.errno == 1290  # --read-only


def test_inventory_check_json_shows_primary_and_two_replicas(demo, cli):
    r = cli("inventory", "check", str(demo.inventory_file), "--json")
    assert r.returncode == 0, r.stderr
    data = jsonlines.result(r.stdout)
    roles = sorted(s["role"] for s in data["servers"])
    assert roles == ["primary", "replica", "replica"]
    by_role = {s["name"]: s for s in data["servers"]}
    assert by_role["shared-1"]["read_only"] is False
    assert by_role["shared-2"]["read_only"] is True and by_role["shared-3"]["read_only"] is True
    for name in ("shared-2", "shared-3"):
        assert by_role[name]["lag_transactions"] == 0
        assert by_role[name]["io_running"] == "Yes" and by_role[name]["sql_running"] == "Yes"


def test_inventory_check_table(demo, cli):
    r = cli("inventory", "check", str(demo.inventory_file))
    assert r.returncode == 0, r.stderr
    for name in ("shared-1", "shared-2", "shared-3"):
        assert name in r.stdout
    assert "primary" in r.stdout and "io=Yes sql=Yes" in r.stdout


def test_existing_sandbox_name_is_refused(demo, cli):
    r = cli("sandbox", "up", "--name", "shared", "--replicas", "0")
    assert r.returncode == 2
    assert "a sandbox named 'shared' already exists" in r.stderr
    assert "Traceback" not in r.stderr


def test_add_instances_status_and_down_leave_no_process(boxes, cli):
    state = boxes.up("lifecycle", 1)
    boxes.add_instance("lifecycle", "lifecycle-new", replica_of="lifecycle-1", buffer_pool_mb=128)
    boxes.add_instance("lifecycle", "lifecycle-solo")
    r = cli("sandbox", "status", "lifecycle", "--json")
    assert r.returncode == 0, r.stderr
    status = {s["name"]: s for s in jsonlines.result(r.stdout)}
    assert set(status) == {"lifecycle-1", "lifecycle-2", "lifecycle-new", "lifecycle-solo"}
    assert all(s["running"] for s in status.values())
    from dbmigrate.config import load_inventory

    inv = load_inventory(state.inventory_file)
    with inv.open("lifecycle-1") as p:
        p.execute("CREATE TABLE app.t_life (id INT PRIMARY KEY)")
        p.execute("INSERT INTO app.t_life VALUES (7)")
    with inv.open("lifecycle-new") as n:
        assert _wait(lambda: n.scalar("SELECT COUNT(*) FROM app.t_life") == 1)
        assert int(n.scalar("SELECT @@innodb_buffer_pool_size")) == 128 * 1024 * 1024
    with inv.open("lifecycle-solo") as s:
        # standalone: its own cluster, no replication, clean binlog (no local GTIDs)
        assert s.query("SHOW SLAVE STATUS") == []
        assert s.scalar("SELECT @@gtid_binlog_pos") == ""
    assert inv.find_server("lifecycle-solo")[0] == "lifecycle-solo"
    pids = [s["pid"] for s in status.values()]
    r = cli("sandbox", "down", "lifecycle")
    assert r.returncode == 0, r.stderr
    assert not any(pid_alive(p) for p in pids)
    r = cli("sandbox", "ls", "--json")
    assert "lifecycle" not in [s["name"] for s in jsonlines.result(r.stdout)]


def test_rehearse_down_knows_a_kept_sandbox_by_its_name(boxes, cli):
    boxes.up("keptbox", 0)
    pids = boxes.pids("keptbox")
    r = cli("rehearse", "down", "keptbox")
    assert r.returncode == 0 and "removed sandbox keptbox" in r.stdout, r.stdout + r.stderr
    assert pids and not any(pid_alive(p) for p in pids)
    r = cli("rehearse", "down", "keptbox")  # gone: named as neither a sandbox nor a topology
    assert r.returncode != 0 and "no compose topology named keptbox" in r.stderr, r.stderr


def _inventory_text(port: int, extra: str = "", creds: str = "defaults_file: credentials.cnf, group: client-admin") -> str:
    return ("defaults:\n  connect_timeout: 1\n" + (f"  credentials: {{{creds}}}\n" if creds else "") +
            f"clusters:\n  c:\n    servers:\n      s1: {{host: {extra or '127.0.0.1'}, port: {port}}}\n")


def test_wrong_password_is_one_clear_line(demo, cli, tmp_path):
    (tmp_path / "credentials.cnf").write_text("[client-admin]\nuser=dbm_admin\npassword=wrong-password\n")
    port = demo.instances["shared-1"].port
    (tmp_path / "inv.yaml").write_text(_inventory_text(port))
    r = cli("inventory", "check", str(tmp_path / "inv.yaml"))
    assert r.returncode == 1
    assert "refused user 'dbm_admin': access denied" in r.stderr
    assert "wrong-password" not in r.stderr + r.stdout
    assert "Traceback" not in r.stderr


def test_unreachable_host_fails_within_connect_timeout(demo, cli, tmp_path):
    (tmp_path / "credentials.cnf").write_text("[client-admin]\nuser=dbm_admin\npassword=x\n")
    (tmp_path / "inv.yaml").write_text(_inventory_text(3306, extra="10.255.255.1"))
    started = time.monotonic()
    r = cli("inventory", "check", str(tmp_path / "inv.yaml"))
    elapsed = time.monotonic() - started
    assert r.returncode == 1
    assert "10.255.255.1:3306" in r.stderr
    assert ("did not answer within 1s" in r.stderr) or ("cannot reach" in r.stderr)
    assert elapsed < 10  # connect timeout 1 s, plus interpreter start


def test_port_that_is_not_mysql(demo, cli, tmp_path):
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    port = srv.getsockname()[1]

    def serve():  # an HTTP-ish server that never speaks the MySQL handshake
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    (tmp_path / "credentials.cnf").write_text("[client-admin]\nuser=dbm_admin\npassword=x\n")
    (tmp_path / "inv.yaml").write_text(_inventory_text(port))
    try:
        r = cli("inventory", "check", str(tmp_path / "inv.yaml"))
    finally:
        srv.close()
    assert r.returncode == 1
    assert "did not answer as a MySQL server" in r.stderr, r.stderr


def test_missing_credentials_is_a_usage_error(cli, tmp_path):
    (tmp_path / "inv.yaml").write_text(_inventory_text(3306, creds=""))
    r = cli("inventory", "check", str(tmp_path / "inv.yaml"))
    assert r.returncode == 2
    assert "clusters.c.servers.s1: missing credentials" in r.stderr
    assert "Traceback" not in r.stderr


def test_invalid_yaml_via_cli(cli, tmp_path):
    (tmp_path / "inv.yaml").write_text("clusters: [\n")
    r = cli("inventory", "check", str(tmp_path / "inv.yaml"))
    assert r.returncode == 2 and "YAML syntax error" in r.stderr and "Traceback" not in r.stderr


def test_instances_added_to_one_sandbox_at_once_get_their_own_names_ports_and_server_ids(boxes):
    """A consolidation creates its planned instances side by side: every one is in the state and
    the inventory, with a port and server id of its own, and a name taken twice fails clearly."""
    from concurrent.futures import ThreadPoolExecutor

    from dbmigrate.config import load_inventory
    from dbmigrate.exceptions import UsageError
    from dbmigrate.rehearsal.sandbox.ports import free_port_range

    boxes.up("side", 0, buffer_pool_mb=32)
    try:
        base = free_port_range(3)
        names = ["side-a", "side-b", "side-c"]
        with ThreadPoolExecutor(4) as pool:
            made = list(pool.map(lambda k: boxes.add_instance("side", names[k], buffer_pool_mb=32, port=base + k),
                                 range(3)))
            twice = [pool.submit(boxes.add_instance, "side", "side-a", buffer_pool_mb=32)]
        with pytest.raises(UsageError, match="already has an instance 'side-a'"):
            twice[0].result()
        assert [(m.name, m.port) for m in made] == [(n, base + k) for k, n in enumerate(names)]
        state = boxes.find("side")
        assert set(state.instances) == {"side-1", *names}
        assert len({i.server_id for i in state.instances.values()}) == 4
        assert len({i.port for i in state.instances.values()}) == 4
        inv = load_inventory(state.inventory_file)
        for k, name in enumerate(names):
            with inv.open(name) as s:
                assert int(s.scalar("SELECT @@port")) == base + k
                assert int(s.scalar("SELECT @@server_id")) == state.instances[name].server_id
    finally:
        boxes.down("side")
