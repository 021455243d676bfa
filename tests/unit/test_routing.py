"""Routers without a real HAProxy: the DSN file, reply and state parsing, and the
runtime API conversation against a scripted admin socket."""

from __future__ import annotations

import json
import os
import socket
import stat
import tempfile
import threading
from pathlib import Path

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.routing import DsnFileRouter, HAProxyRouter, NoRouting, RouterError, ServerRef, router_for
from dbmigrate.routing.base import as_ref, same_address
from dbmigrate.routing.haproxy import check_reply, parse_servers_state, switch_commands

HEADER = ("1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight "
          "srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state "
          "srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port "
          "srv_check_addr srv_agent_addr srv_agent_port\n")


def row(backend: str, name: str, port: int, op: int, admin: int, weight: int = 1, be_id: int = 3) -> str:
    return f"{be_id} {backend} 1 {name} 127.0.0.1 {op} {admin} {weight} 1 0 1 0 2 0 0 0 0 - {port} - 0 0 - - 0\n"


# -- DSN file ------------------------------------------------------------------

def test_dsn_file_switch_writes_json_atomically_and_keeps_other_clusters(tmp_path):
    path = tmp_path / "dsn.json"
    path.write_text(json.dumps({"format": 1, "version": 5, "clusters": {
        "billing": {"writer": "10.0.0.9:3306", "readers": ["10.0.0.10:3306"], "version": 2}}}))
    r = DsnFileRouter("orders", path)
    r.switch_writer("10.0.0.5:3306")
    r.set_readers(["10.0.0.6:3306", "10.0.0.7:3306"])
    st = r.switch_writer(ServerRef("db-6", "10.0.0.6", 3306), old="10.0.0.5:3306")

    doc = json.loads(path.read_text())
    assert doc["clusters"]["billing"] == {"writer": "10.0.0.9:3306", "readers": ["10.0.0.10:3306"], "version": 2}
    orders = doc["clusters"]["orders"]
    assert orders["writer"] == "10.0.0.6:3306"
    assert orders["readers"] == ["10.0.0.6:3306", "10.0.0.7:3306"]  # a switch does not touch readers
    assert orders["version"] == 3 and doc["version"] == 8
    assert orders["updated_at"].endswith("Z") and doc["updated_at"] == orders["updated_at"]
    assert st.writer == "10.0.0.6:3306" and st.writers == ["10.0.0.6:3306"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    # no temporary files left next to it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dsn.json", "dsn.json.lock"]


def test_dsn_file_refuses_switch_when_old_writer_is_not_current(tmp_path):
    path = tmp_path / "dsn.json"
    r = DsnFileRouter("orders", path)
    r.switch_writer("10.0.0.5:3306")
    before = path.read_text()
    with pytest.raises(RouterError, match="names 10.0.0.5:3306 .* not 10.0.0.7:3306"):
        r.switch_writer("10.0.0.6:3306", old="10.0.0.7:3306")
    assert path.read_text() == before


def test_dsn_file_switch_is_idempotent(tmp_path):
    path = tmp_path / "dsn.json"
    r = DsnFileRouter("orders", path)
    r.switch_writer("10.0.0.5:3306")
    r.switch_writer("10.0.0.6:3306", old="10.0.0.5:3306")
    version = json.loads(path.read_text())["version"]
    r.switch_writer("10.0.0.6:3306", old="10.0.0.5:3306")  # re-run after a crash: no change, no new version
    assert json.loads(path.read_text())["version"] == version
    assert r.describe_switch("10.0.0.6:3306")[0].endswith("nothing to do")


def test_dsn_file_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "dsn.json"
    r = DsnFileRouter("orders", path)
    r.switch_writer("10.0.0.5:3306")
    before = path.read_text()

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(RouterError, match="No space left on device"):
        r.switch_writer("10.0.0.6:3306", old="10.0.0.5:3306")
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_dsn_file_concurrent_switchers_never_lose_an_update(tmp_path):
    """Two processes' read-modify-write cycles are serialised by the lock: every
    cluster's entry survives and the version counts every change."""
    path = tmp_path / "dsn.json"
    errors = []

    def worker(n: int):
        try:
            r = DsnFileRouter(f"c{n}", path)
            for i in range(20):
                r.switch_writer(f"10.0.{n}.{i}:3306")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    doc = json.loads(path.read_text())
    assert {c: e["writer"] for c, e in doc["clusters"].items()} == {f"c{n}": f"10.0.{n}.19:3306" for n in range(4)}
    assert doc["version"] == 80


def test_dsn_file_rejects_garbage_and_bad_weights(tmp_path):
    path = tmp_path / "dsn.json"
    path.write_text("{not json")
    with pytest.raises(RouterError, match="not valid JSON"):
        DsnFileRouter("orders", path).current()
    path.write_text(json.dumps({"format": 1, "clusters": {"orders": {"writer": "a:1", "readers": ["b:2"]}}}))
    r = DsnFileRouter("orders", path)
    with pytest.raises(RouterError, match="not among the readers"):
        r.set_reader_weights({"c:3": 10})
    with pytest.raises(RouterError, match="out of range"):
        r.set_reader_weights({"b:2": 999})
    assert r.set_reader_weights({"b:2": 0}).reader_weights == {"b:2": 0}


def test_verify_gate_reports_wrong_or_missing_writer(tmp_path):
    r = DsnFileRouter("orders", tmp_path / "dsn.json")
    ok, reason, _ = r.verify("10.0.0.5:3306")
    assert not ok and "no server takes writes" in reason
    r.switch_writer("10.0.0.5:3306")
    assert r.verify("10.0.0.5:3306")[0]
    ok, reason, details = r.verify("10.0.0.6:3306")
    assert not ok and "writes go to 10.0.0.5:3306" in reason and details["expected"] == "10.0.0.6:3306"


# -- HAProxy: pure pieces ------------------------------------------------------

def test_check_reply_blank_is_success_text_is_failure():
    check_reply(["set server writer/a state ready"], "\n\n")
    check_reply(["x"], "")
    with pytest.raises(RouterError, match="No such server"):
        check_reply(["set server writer/nope state maint"], "No such server.\n\n")
    with pytest.raises(RouterError, match="Unknown command"):
        check_reply(["bogus"], "Unknown command, but maybe one of the following ones is a better match:\n  show fd\n")


def test_switch_commands_open_new_then_close_and_cut_every_old():
    assert switch_commands("writer", "db2", ["db1"]) == [
        "set server writer/db2 state ready", "set server writer/db1 state maint",
        "shutdown sessions server writer/db1"]
    assert switch_commands("writer", "db2", ["db1", "db2", "db3"])[3:] == [
        "set server writer/db3 state maint", "shutdown sessions server writer/db3"]


def test_parse_servers_state_uses_operational_state():
    text = HEADER + row("writer", "db1", 3306, op=0, admin=1) + row("writer", "db2", 3307, op=2, admin=0) + \
        row("readers", "db2", 3307, op=2, admin=8, weight=50, be_id=5) + "\n"
    rows = parse_servers_state(text)
    assert [(r.backend, r.name, r.address) for r in rows] == [
        ("writer", "db1", "127.0.0.1:3306"), ("writer", "db2", "127.0.0.1:3307"), ("readers", "db2", "127.0.0.1:3307")]
    assert [r.takes_new_connections for r in rows] == [False, True, False]  # drain takes no new connections
    assert rows[0].in_maint and not rows[1].in_maint and rows[2].weight == 50
    with pytest.raises(RouterError, match="format"):
        parse_servers_state("2\n# be_id\n")


def test_as_ref_and_address_matching():
    assert as_ref("10.0.0.5:3306") == ServerRef("10.0.0.5:3306", "10.0.0.5", 3306)
    with pytest.raises(RouterError, match="host:port"):
        as_ref("10.0.0.5")
    assert same_address("localhost:3306", "127.0.0.1:3306")
    assert not same_address("127.0.0.1:3306", "127.0.0.1:3307")


# -- HAProxy: the conversation over a scripted admin socket --------------------

class FakeAdmin:
    """A unix socket that answers like HAProxy's runtime API and keeps the state of
    one writer backend, so the router's requests can be checked one by one."""

    def __init__(self, servers: dict[str, tuple[int, bool]], fail_on: str | None = None):
        self.dir = tempfile.mkdtemp(prefix="dbmf-", dir="/tmp")
        self.path = f"{self.dir}/admin.sock"
        self.servers = {n: {"port": p, "ready": ready} for n, (p, ready) in servers.items()}
        self.requests: list[str] = []
        self.fail_on = fail_on
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def state_text(self) -> str:
        return HEADER + "".join(row("writer", n, s["port"], 2 if s["ready"] else 0, 0 if s["ready"] else 1)
                                for n, s in self.servers.items()) + "\n"

    def _answer(self, line: str) -> str:
        out = []
        for cmd in [c.strip() for c in line.split(";")]:
            if cmd.startswith("show servers state"):
                out.append(self.state_text())
            elif self.fail_on and self.fail_on in cmd:
                out.append("No such server.\n")
            elif cmd.startswith("set server writer/"):
                name, _, st = cmd[len("set server writer/"):].partition(" state ")
                self.servers[name]["ready"] = st == "ready"
                out.append("\n")
            else:
                out.append("\n")
        return "".join(out) + "\n"

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                line = data.decode().strip()
                self.requests.append(line)
                conn.sendall(self._answer(line).encode())

    def close(self):
        self.sock.close()
        Path(self.path).unlink(missing_ok=True)
        os.rmdir(self.dir)


@pytest.fixture
def fake_admin():
    admins = []

    def make(**kw):
        a = FakeAdmin(**kw)
        admins.append(a)
        return a

    yield make
    for a in admins:
        a.close()


def test_haproxy_switch_sends_one_request_and_dumps_state(fake_admin, tmp_path):
    admin = fake_admin(servers={"db1": (3306, True), "db2": (3307, False), "db3": (3308, False)})
    state_file = tmp_path / "server-state"
    r = HAProxyRouter("orders", admin.path, reader_backend=None, state_file=str(state_file))
    st = r.switch_writer("127.0.0.1:3307", old="127.0.0.1:3306")
    changes = [q for q in admin.requests if not q.startswith("show")]
    assert changes == ["set server writer/db2 state ready; set server writer/db1 state maint; "
                       "shutdown sessions server writer/db1"]
    assert st.writer == "127.0.0.1:3307" and st.writers == ["127.0.0.1:3307"]
    saved = parse_servers_state(state_file.read_text())
    assert [r.name for r in saved if r.takes_new_connections] == ["db2"]
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    ok, reason, _ = r.verify("127.0.0.1:3307")
    assert ok, reason


def test_haproxy_switch_failure_reply_raises_and_keeps_state_file(fake_admin, tmp_path):
    admin = fake_admin(servers={"db1": (3306, True), "db2": (3307, False)}, fail_on="writer/db1 state maint")
    r = HAProxyRouter("orders", admin.path, reader_backend=None, state_file=str(tmp_path / "server-state"))
    with pytest.raises(RouterError, match="HAProxy refused .*No such server"):
        r.switch_writer("127.0.0.1:3307", old="127.0.0.1:3306")
    assert not (tmp_path / "server-state").exists()  # never dump a state we did not intend


def test_haproxy_refuses_unknown_server_and_unexpected_old_writer(fake_admin):
    admin = fake_admin(servers={"db1": (3306, True), "db2": (3307, False), "db3": (3308, False)})
    r = HAProxyRouter("orders", admin.path, reader_backend=None)
    with pytest.raises(RouterError, match="127.0.0.1:3399 is not a server of HAProxy backend 'writer'"):
        r.switch_writer("127.0.0.1:3399", old="127.0.0.1:3306")
    with pytest.raises(RouterError, match="not to 127.0.0.1:3308: refusing"):
        r.switch_writer("127.0.0.1:3307", old="127.0.0.1:3308")
    assert all(q.startswith("show") for q in admin.requests)  # nothing was changed


def test_haproxy_switch_closes_a_stray_second_writer(fake_admin):
    admin = fake_admin(servers={"db1": (3306, True), "db2": (3307, False), "db3": (3308, True)})
    r = HAProxyRouter("orders", admin.path, reader_backend=None)
    assert not r.verify("127.0.0.1:3306")[0]  # two writers: the gate says so
    lines = r.describe_switch("127.0.0.1:3307")
    assert "set server writer/db3 state maint; shutdown sessions server writer/db3" in lines[0]
    assert "a reload of HAProxy would forget" in lines[1]
    r.switch_writer("127.0.0.1:3307")
    assert r.current().writers == ["127.0.0.1:3307"]


def test_haproxy_missing_socket_is_a_clear_error(tmp_path):
    r = HAProxyRouter("orders", str(tmp_path / "nope.sock"))
    with pytest.raises(RouterError, match="does not exist") as e:
        r.current()
    assert "stats socket" in e.value.hint
    ok, reason, _ = r.verify("127.0.0.1:3306")
    assert not ok and "cannot read the haproxy router" in reason


# -- factory --------------------------------------------------------------------

def test_router_for_reads_inventory_router_sections(tmp_path):
    (tmp_path / "inv.yaml").write_text("""
version: 1
defaults: {credentials: {password_env: X, user: u}}
clusters:
  a:
    servers: {a1: {host: 127.0.0.1, port: 3306}}
    router: {kind: haproxy, admin_socket: run/admin.sock, state_file: run/state}
  b:
    servers: {b1: {host: 127.0.0.1, port: 3307}}
    router: {kind: dsn-file, path: dsn.json}
  c:
    servers: {c1: {host: 127.0.0.1, port: 3308}}
""")
    inv = load_inventory(tmp_path / "inv.yaml")
    a = router_for(inv, "a")
    assert isinstance(a, HAProxyRouter) and a.admin.path == str(tmp_path / "run/admin.sock")
    assert a.state_file == tmp_path / "run/state" and a.writer_backend == "writer"
    b = router_for(inv, "b")
    assert isinstance(b, DsnFileRouter) and b.path == tmp_path / "dsn.json"
    c = router_for(inv, "c")
    assert isinstance(c, NoRouting) and c.verify("127.0.0.1:3308")[0]


# -- sandbox HAProxy configuration ------------------------------------------------

def test_sandbox_haproxy_config_is_valid_and_lists_every_instance(tmp_path):
    import shutil
    import subprocess

    from dbmigrate.rehearsal.sandbox.haproxy import render_config

    text = render_config(str(tmp_path / "admin.sock"), str(tmp_path / "state"), 41001, 41002,
                         {"sb-1": 3306, "sb-2": 3307})
    assert f"stats socket {tmp_path}/admin.sock mode 600 level admin" in text
    assert "load-server-state-from-file global" in text and "timeout connect 1s" in text
    assert text.count("server sb-1 127.0.0.1:3306") == 2 and text.count("server sb-2 127.0.0.1:3307") == 2
    assert "disabled" not in text  # non-writers go to maint at runtime, not in the file
    if shutil.which("haproxy"):
        cfg = tmp_path / "h.cfg"
        cfg.write_text(text)
        check = subprocess.run(["haproxy", "-c", "-q", "-f", str(cfg)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr


def test_sandbox_admin_socket_moves_to_a_short_dir_when_the_path_is_too_long(tmp_path):
    import shutil

    from dbmigrate.rehearsal.sandbox.haproxy import MAX_SOCKET_PATH, _socket_path

    short, tmp = _socket_path(tmp_path)
    assert short == f"{tmp_path}/admin.sock" and tmp is None
    deep = tmp_path / ("d" * 120)
    path, tmp = _socket_path(deep)
    try:
        assert len(path) <= MAX_SOCKET_PATH and path == f"{tmp}/admin.sock" and Path(tmp).is_dir()
    finally:
        shutil.rmtree(tmp)


def test_haproxy_prepared_switch_is_one_request_with_nothing_read_before_it(fake_admin):
    admin = fake_admin(servers={"db1": (3306, True), "db2": (3307, False)})
    r = HAProxyRouter("orders", admin.path, reader_backend=None)
    r.prepare_switch("127.0.0.1:3307", old="127.0.0.1:3306")
    admin.requests.clear()
    st = r.switch_writer("127.0.0.1:3307", old="127.0.0.1:3306")
    assert admin.requests[0] == ("set server writer/db2 state ready; set server writer/db1 state maint; "
                                 "shutdown sessions server writer/db1")  # the flip comes first
    assert st.writers == ["127.0.0.1:3307"]
    admin.requests.clear()
    r.switch_writer("127.0.0.1:3306", old="127.0.0.1:3307")  # a prepared plan serves once, for its pair
    assert admin.requests[0].startswith("show servers state")
