"""The relay (relay/, a Go program) in front of a real MariaDB primary and its replica: an
application connection (mysql-connector-python, server-side prepared statements, its own session
variables, a default database) goes on through a switchover with no error.

hold -> the client's next statement waits at its boundary, while another client's open
transaction goes on until it commits; the replica is promoted by hand; move -> each session logs in
to the new primary and replays its database, SETs and prepared statements; release -> the held
statement runs there, on the same client connection."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import mysql.connector
import pytest

from dbmigrate.config import load_inventory
from dbmigrate.rehearsal.sandbox import relay as sandbox_relay
from dbmigrate.exceptions import SandboxError
from dbmigrate.rehearsal.sandbox.ports import free_port

pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def relay_binary() -> Path:
    """Built once per version of its sources, as the sandbox builds it."""
    try:
        sandbox_relay.go_binary()
    except SandboxError as e:
        pytest.skip(e.message)
    return sandbox_relay.relay_binary()


class Relay:
    """One relay process on an ephemeral port, its control socket and log in a temp dir."""

    def __init__(self, binary: Path, workdir: Path, backend: str, users: dict[str, str], *,
                 max_hold_s: float = 20, drain_s: float = 3):
        self.workdir = workdir
        self.users_file = workdir / "users"
        sandbox_relay.write_users_file(self.users_file, list(users.items()))
        self.control = str(workdir / "control.sock")
        self.port = free_port()
        self.log = workdir / "relay.log"
        self.proc = subprocess.Popen(
            [str(binary), "-listen", f"127.0.0.1:{self.port}", "-backend", backend, "-users", str(self.users_file),
             "-control", self.control, "-max-hold-s", str(max_hold_s), "-drain-s", str(drain_s)],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"), stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                if os.path.exists(self.control):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"relay did not listen: {self.log.read_text()}")

    def ctl(self, *args: str) -> dict:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(30)
            s.connect(self.control)
            s.sendall((" ".join(args) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return json.loads(data)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _connect(port: int, user: str, password: str, **kw):
    return mysql.connector.connect(host="127.0.0.1", port=port, user=user, password=password, database="app",
                                   use_pure=True, autocommit=True, ssl_disabled=True, connection_timeout=30, **kw)


def _wait(cond, timeout: float = 10, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _in_thread(fn):
    """Run fn in a thread; returns (thread, box) where box gets 'result' or 'error'."""
    box: dict = {}

    def run():
        try:
            box["result"] = fn()
        except Exception as e:  # the test asserts there was none
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def _promote(inv, old: str, new: str) -> None:
    """The switchover by hand: fence the old primary, wait for the replica, open it."""
    with inv.open(old) as o:
        o.execute("SET GLOBAL read_only=1")
        pos = o.scalar("SELECT @@gtid_binlog_pos")
    with inv.open(new) as n:
        assert n.scalar("SELECT MASTER_GTID_WAIT(%s, 20)", (pos,)) == 0
        n.execute("STOP SLAVE")
        n.execute("RESET SLAVE ALL")
        n.execute("SET GLOBAL read_only=0")


def test_a_session_moves_to_the_new_primary_through_hold_move_release(boxes, relay_binary, tmp_path):
    name = "relaylive"
    state = boxes.up(name, 1)
    relay = None
    clients = []
    try:
        inv = load_inventory(state.inventory_file)
        old, new = f"{name}-1", f"{name}-2"
        creds = inv.app_credentials(name)
        with inv.open(old) as admin:
            plugin, stored = admin.query("SELECT plugin, authentication_string FROM mysql.user WHERE User=%s",
                                         (creds.user,))[0].values()
            assert plugin == "mysql_native_password"
            admin.execute("CREATE TABLE app.relay_t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(32) NOT NULL)")
        relay = Relay(relay_binary, tmp_path, f"127.0.0.1:{state.instances[old].port}", {creds.user: stored})

        # A: the application connection, its session state and two prepared statements.
        a = _connect(relay.port, creds.user, creds.password)
        clients.append(a)
        setup = a.cursor()
        setup.execute("SET SESSION lock_wait_timeout = 17")
        setup.execute("SET @relay_tag = 'kept'")
        setup.close()
        probe_sql = "SELECT @@server_id, DATABASE(), @@session.lock_wait_timeout, @relay_tag, ? + 1"
        probe = a.cursor(prepared=True)
        insert = a.cursor(prepared=True)

        def look():
            probe.execute(probe_sql, (41,))
            row = probe.fetchall()[0]
            return tuple(v.decode() if isinstance(v, (bytes, bytearray)) else v for v in row)

        assert look() == (1, "app", 17, "kept", 42)
        insert.execute("INSERT INTO relay_t (v) VALUES (?)", ("before",))

        # B: a transaction open across the hold.
        b = _connect(relay.port, creds.user, creds.password)
        clients.append(b)
        b.start_transaction()
        bc = b.cursor()
        bc.execute("INSERT INTO relay_t (v) VALUES ('in-trx-1')")

        st = relay.ctl("hold")["status"]
        assert st["holding"] and st["in_transaction"] == 1, st
        assert relay.ctl("hold")["ok"]  # idempotent

        # The open transaction goes on and commits while the relay holds.
        t0 = time.monotonic()
        bc.execute("INSERT INTO relay_t (v) VALUES ('in-trx-2')")
        b.commit()
        commit_s = time.monotonic() - t0
        assert commit_s < 3, commit_s
        assert relay.ctl("status")["status"]["in_transaction"] == 0

        # A's next statement waits at its boundary; so does B's, now that it committed.
        ta, box_a = _in_thread(look)
        tb, box_b = _in_thread(lambda: (bc.execute("SELECT @@server_id"), bc.fetchall())[1])
        _wait(lambda: relay.ctl("status")["status"]["held"] == 2, what="both sessions held")
        time.sleep(0.5)
        assert ta.is_alive() and tb.is_alive(), (box_a, box_b)

        _promote(inv, old, new)
        moved = relay.ctl("move", f"127.0.0.1:{state.instances[new].port}")
        assert moved["ok"] and moved["move"]["moved"] == 2 and moved["move"]["failed"] == 0, moved
        assert ta.is_alive()  # moved, still held
        released = relay.ctl("release")
        assert released["ok"] and not released["status"]["holding"]
        ta.join(10)
        tb.join(10)
        assert "error" not in box_a and "error" not in box_b, (box_a, box_b)

        # The same connection, on the new primary, with its variables, database and statements.
        new_id = state.instances[new].server_id
        assert box_a["result"] == (new_id, "app", 17, "kept", 42), box_a
        assert box_b["result"] == [(new_id,)], box_b
        insert.execute("INSERT INTO relay_t (v) VALUES (?)", ("after",))
        assert look() == (new_id, "app", 17, "kept", 42)
        with inv.open(new) as n:
            rows = [r["v"] for r in n.query("SELECT v FROM app.relay_t ORDER BY id")]
        assert rows == ["before", "in-trx-1", "in-trx-2", "after"], rows

        st = relay.ctl("status")["status"]
        assert st["backend"].endswith(f":{state.instances[new].port}") and st["on_old_backend"] == 0, st
        assert relay.ctl("move", f"127.0.0.1:{state.instances[new].port}")["move"]["moved"] == 0  # idempotent

        # A wrong password is refused by the relay itself.
        with pytest.raises(mysql.connector.Error) as refused:
            _connect(relay.port, creds.user, creds.password + "x")
        assert refused.value.errno == 1045

        log = relay.log.read_text()
        print(log)
        assert creds.password not in log and stored[1:] not in log
    finally:
        for c in clients:
            try:
                c.close()
            except Exception:
                pass
        if relay is not None:
            relay.stop()
        boxes.down(name)
