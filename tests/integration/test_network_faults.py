"""Faults of the network and of the tool's process, for real.

The harness's iptables partitions on loopback drop (not refuse) packets and are gone
afterwards, and a statement sent into a partition reaches its server after the partition
heals, long after its sender gave up on it. Then promotes on a real sandbox under load
meet exactly that: the candidate partitioned from its open (`read_only=OFF`) for 4.6 s
of its 5 s bound, whole port or only the tool's own connection; the old primary
partitioned 3.5 s from its fence; the tool frozen 40 s right after the fence. Each is
judged until 30 s after the tool (and the operator's one command) exited, with a watcher
reading @@read_only every 10 ms on every server over unix sockets as the application's
account: no acknowledged write lost, never two writable servers, no stretch without a
writable server longer than the bound, healthy after at most one `rollback`.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time

import pytest

from dbmigrate.rehearsal.faultmatrix import FaultCluster, netfault, run_scenario
from dbmigrate.rehearsal.faultmatrix.scenarios import issue_reproductions

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("iptables"),
                                 reason="partitions need root and iptables")]


class Listener:
    """A TCP server on an ephemeral loopback port that keeps what each connection sent."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.received: list[tuple[float, int, bytes]] = []  # (monotonic, client port, data)
        self.conns: dict[int, socket.socket] = {}  # client port -> the server's side
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return
            self.conns[addr[1]] = conn
            threading.Thread(target=self._read, args=(conn, addr[1]), daemon=True).start()

    def _read(self, conn, client_port):
        with conn:
            while True:
                data = conn.recv(4096)
                if not data:
                    return
                self.received.append((time.monotonic(), client_port, data))

    def accepted(self, client_port: int) -> socket.socket:
        assert _wait(lambda: client_port in self.conns, 2)
        return self.conns[client_port]

    def got(self, text: bytes) -> float | None:
        return next((t for t, _, d in self.received if text in d), None)

    def close(self):
        self.sock.close()


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    lst.close()


def _our_rules() -> list[str]:
    return [ln for ln in netfault.iptables(["-S", "INPUT"]).splitlines() if netfault.own_tag() in ln]


def _connects(port: int, timeout: float = 0.4) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=timeout).close()
        return True
    except OSError:
        return False


def _wait(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def test_a_partitioned_port_drops_then_heals_and_leaves_no_rule(listener):
    assert _connects(listener.port)
    with pytest.raises(RuntimeError):
        with netfault.partition(listener.port):
            assert len(_our_rules()) == 1
            assert not _connects(listener.port)  # dropped: the connect times out, nothing refuses it
            raise RuntimeError("whatever happens inside")
    assert _our_rules() == []
    assert _connects(listener.port)


def test_a_statement_sent_into_a_partition_lands_after_it_heals(listener):
    c = socket.create_connection(("127.0.0.1", listener.port))
    try:
        c.sendall(b"before;")
        assert _wait(lambda: listener.got(b"before;"), 2)
        with netfault.partition_at_statement(listener.port, "read_only=OFF", scope="connection") as trigger:
            sent = time.monotonic()
            c.sendall(b"SET GLOBAL read_only=OFF;")
            assert trigger.wait(2)
            assert _connects(listener.port)  # only that connection is cut: a new session passes
            time.sleep(1.0)
            assert listener.got(b"read_only=OFF") is None
        assert _our_rules() == []
        # The sender's kernel retransmits: the statement arrives after the heal, by itself.
        assert _wait(lambda: listener.got(b"read_only=OFF"), 10)
        assert listener.got(b"read_only=OFF") - sent > 1.0
    finally:
        c.close()


def test_a_statement_starts_a_partition_of_the_whole_port(listener):
    c = socket.create_connection(("127.0.0.1", listener.port))
    try:
        with netfault.partition_at_statement(listener.port, "read_only=ON") as trigger:
            assert _connects(listener.port)  # armed, not started
            assert not trigger.fired()
            c.sendall(b"SET GLOBAL read_only=ON;")
            assert trigger.wait(2)
            assert not _connects(listener.port)  # from the statement on, the whole port
        assert _our_rules() == []
        assert _connects(listener.port)
        assert _wait(lambda: listener.got(b"read_only=ON"), 10)
    finally:
        c.close()


def test_one_connection_partitioned_by_its_client_port(listener):
    a = socket.create_connection(("127.0.0.1", listener.port))
    b = socket.create_connection(("127.0.0.1", listener.port))
    try:
        assert netfault.client_ports(os.getpid(), listener.port) == sorted([a.getsockname()[1], b.getsockname()[1]])
        served = listener.accepted(a.getsockname()[1])
        with netfault.partition_connection(listener.port, a.getsockname()[1]):
            a.sendall(b"from-a;")
            b.sendall(b"from-b;")
            served.sendall(b"to-a;")  # the server's side of the cut connection: dropped too
            assert _wait(lambda: listener.got(b"from-b;"), 2)
            a.settimeout(0.5)
            with pytest.raises(socket.timeout):
                a.recv(100)
            assert listener.got(b"from-a;") is None
        assert _our_rules() == []
        assert _wait(lambda: listener.got(b"from-a;"), 10)
        a.settimeout(10)
        assert a.recv(100) == b"to-a;"
    finally:
        a.close()
        b.close()


# -- promotes meeting a partition or a frozen tool ---------------------------------------

@pytest.fixture(scope="module")
def cluster(boxes):
    c = FaultCluster(boxes, "nf")
    yield c
    c.down()
    assert netfault.remove_leftovers() == 0, "a fault rule outlived its scenario"


@pytest.mark.parametrize("scenario", [pytest.param(s, id=s.id) for s in issue_reproductions()])
def test_promote_meets_a_delaying_network_or_a_frozen_tool(cluster, scenario):
    r = run_scenario(cluster, scenario)
    summary = (f"{r.id}: {'; '.join(r.why) or 'ok'}; run {r.run_status}, operator {r.action} -> {r.action_status}; "
               f"monitor {r.details.get('monitor', {})}; run: {r.details.get('run_output_tail', '')[-600:]}; "
               f"recovery: {r.details.get('recovery_output_tail', '')[-400:]}")
    assert r.details.get("fault_started"), f"the fault never began: {summary}"
    assert r.details.get("judged_after_exit_s") == 30, summary
    assert _our_rules() == [], summary
    assert r.acknowledged > 0, summary
    assert r.lost_total == 0, summary
    assert r.two_writable == 0, summary
    assert r.longest_no_writer_ms <= r.bound_ms, summary
    assert r.healthy, summary
    assert r.action in ("nothing", "rollback"), summary
    assert r.why == [], summary
