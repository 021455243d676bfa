"""The fault harness's network and process faults, without touching the firewall: every rule
added is removed (last first) whatever happens inside the block, a failed removal is
reported, leftovers are found by their tag, and a frozen process is always continued."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from dbmigrate.rehearsal.faultmatrix import netfault
from dbmigrate.rehearsal.faultmatrix.netfault import FaultError


class FakeIptables:
    """Records iptables calls and keeps the INPUT chain as a list of rule specs."""

    def __init__(self, fail_on: tuple[str, int] | None = None):
        self.calls: list[list[str]] = []
        self.chain: list[list[str]] = []
        self.fail_on = fail_on  # (action, nth call of that action) that fails

    def __call__(self, args: list[str]) -> str:
        self.calls.append(list(args))
        action, spec = args[0], args[1:]
        if self.fail_on and action == self.fail_on[0] and \
                sum(c[0] == action for c in self.calls) == self.fail_on[1]:
            raise FaultError(f"iptables {action}: refused")
        if action == "-I":
            self.chain.insert(0, spec)
        elif action == "-D":
            if spec not in self.chain:
                raise FaultError("iptables: Bad rule (does a matching rule exist in that chain?)")
            self.chain.remove(spec)
        elif action == "-S":
            return "-P INPUT ACCEPT\n" + "".join(
                "-A " + " ".join(f'"{a}"' if " " in a else a for a in s) + "\n" for s in self.chain)
        return ""


def test_partition_rule_is_removed_on_success_and_on_error():
    ipt = FakeIptables()
    with netfault.partition(3307, run=ipt):
        assert len(ipt.chain) == 1 and "--dport" in ipt.chain[0] and "3307" in ipt.chain[0]
        assert ipt.chain[0][-2:] == ["-j", "DROP"]
    assert ipt.chain == []
    with pytest.raises(RuntimeError):
        with netfault.partition(3307, run=ipt):
            raise RuntimeError("the scenario failed")
    assert ipt.chain == []
    assert [c[0] for c in ipt.calls] == ["-I", "-D", "-I", "-D"]


def test_partition_both_ways_drops_what_the_server_sends_too():
    ipt = FakeIptables()
    with netfault.partition(3307, both_ways=True, run=ipt):
        assert len(ipt.chain) == 2
        assert any(r[r.index("--dport") + 1] == "3307" for r in ipt.chain if "--dport" in r)
        assert any(r[r.index("--sport") + 1] == "3307" for r in ipt.chain if "--sport" in r)
        assert all(r[-2:] == ["-j", "DROP"] for r in ipt.chain)
    assert ipt.chain == []


def test_partition_is_undone_on_keyboard_interrupt():
    ipt = FakeIptables()
    with pytest.raises(KeyboardInterrupt):
        with netfault.partition_connection(3307, 45678, run=ipt):
            back, to = ipt.chain  # both ways: a replica's link carries data from the server
            assert to[to.index("--sport") + 1] == "45678" and to[to.index("--dport") + 1] == "3307"
            assert back[back.index("--sport") + 1] == "3307" and back[back.index("--dport") + 1] == "45678"
            raise KeyboardInterrupt
    assert ipt.chain == []


def test_statement_partition_of_a_port_removes_both_rules_last_first():
    ipt = FakeIptables()
    with netfault.partition_at_statement(3307, "read_only=OFF", run=ipt) as trigger:
        assert len(ipt.chain) == 2
        first, second = ipt.chain  # evaluated in this order
        assert "--set" in first and "read_only=OFF" in first and "-j" not in first
        assert "--rcheck" in second and second[-2:] == ["-j", "DROP"]
        assert trigger.name in first and trigger.name in second
    assert ipt.chain == []
    assert [c[0] for c in ipt.calls] == ["-I", "-I", "-D", "-D"]
    assert ipt.calls[2][1:] == ipt.calls[1][1:]  # the last added goes first


def test_statement_partition_of_another_port_drops_that_port():
    ipt = FakeIptables()
    with netfault.partition_at_statement(3307, "read_only=ON", drop_port=3308, run=ipt):
        trigger_rule, drop_rule = ipt.chain
        assert "3307" in trigger_rule and "3308" in drop_rule and "3307" not in drop_rule
    assert ipt.chain == []


def test_statement_partition_of_its_connection_marks_and_drops_that_connection():
    ipt = FakeIptables()
    with netfault.partition_at_statement(3307, "read_only=OFF", scope="connection", run=ipt):
        mark_rule, drop_rule = ipt.chain
        assert "CONNMARK" in mark_rule and "--set" in mark_rule
        mark = mark_rule[mark_rule.index("--set-mark") + 1]
        assert "connmark" in drop_rule and drop_rule[drop_rule.index("--mark") + 1] == mark
    assert ipt.chain == []
    with pytest.raises(FaultError):
        with netfault.partition_at_statement(3307, "x", scope="connection", drop_port=3308, run=ipt):
            pass
    assert ipt.chain == []


def test_a_rule_that_fails_to_go_in_leaves_none_behind():
    ipt = FakeIptables(fail_on=("-I", 2))
    with pytest.raises(FaultError):
        with netfault.partition_at_statement(3307, "read_only=OFF", run=ipt):
            pytest.fail("the block must not run when the fault is not in place")
    assert ipt.chain == []


def test_a_failed_removal_is_reported_and_the_other_rules_still_go():
    ipt = FakeIptables(fail_on=("-D", 1))
    with pytest.raises(FaultError) as err:
        with netfault.partition_at_statement(3307, "read_only=OFF", run=ipt):
            pass
    assert "could not remove" in err.value.message and "iptables -w -S INPUT" in err.value.hint
    assert len(ipt.chain) == 1  # the one that failed; the other was removed


def test_bad_ports_and_empty_statements_are_refused_before_any_rule():
    ipt = FakeIptables()
    for bad in (0, 70000, "3307"):
        with pytest.raises(FaultError):
            with netfault.partition(bad, run=ipt):  # type: ignore[arg-type]
                pass
    with pytest.raises(FaultError):
        with netfault.partition_at_statement(3307, "", run=ipt):
            pass
    assert ipt.calls == []


def test_leftovers_are_found_by_tag_and_only_they_are_removed():
    ipt = FakeIptables()
    ipt.chain = [["INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT"]]
    cm = netfault.partition_at_statement(3307, "SET GLOBAL read_only=OFF", run=ipt)
    cm.__enter__()  # a harness killed here never reaches __exit__
    assert len(ipt.chain) == 3
    other = ["INPUT", "-p", "tcp", "--dport", "3308", "-m", "comment", "--comment", netfault.own_tag(1) + "7",
             "-j", "DROP"]  # another process's fault: not ours to remove
    ipt.chain.append(other)
    assert netfault.remove_leftovers(run=ipt) == 2
    assert ipt.chain == [["INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT"], other]
    assert netfault.remove_leftovers(run=ipt, any_process=True) == 1
    assert ipt.chain == [["INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT"]]
    with pytest.raises(FaultError):  # its own undo now finds them gone, and says so
        cm.__exit__(None, None, None)


def test_trigger_reads_its_recent_list(tmp_path):
    t = netfault.Trigger("dbmigrate-fault-1-1", recent_dir=tmp_path)
    assert not t.fired() and not t.wait(0.02)
    (tmp_path / t.name).write_text("src=127.0.0.1 ttl: 64 last_seen: 1 oldest_pkt: 1 1\n")
    assert t.wait(1) and t.fired_at is not None
    dead = netfault.Trigger("other", recent_dir=tmp_path)
    assert not dead.wait(10, alive=lambda: False)  # returns at once when the tool is gone


def test_freeze_stops_and_always_continues_the_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(RuntimeError):
            with netfault.freeze(child.pid):
                assert _settles(child.pid, lambda st: st == "T")
                raise RuntimeError("the scenario failed")
        assert _settles(child.pid, lambda st: st != "T")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)


def test_freeze_of_a_process_gone_meanwhile_is_not_an_error():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    with netfault.freeze(child.pid):
        child.kill()
        child.wait(10)


def _settles(pid: int, ok, timeout_s: float = 10.0) -> bool:
    """Signals are delivered asynchronously (on a loaded machine, not at once)."""
    import time

    deadline = time.monotonic() + timeout_s
    while not ok(_state(pid)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return ok(_state(pid))


def _state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def test_client_ports_of_a_process(tmp_path):
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(2)
    port = srv.getsockname()[1]
    c = socket.create_connection(("127.0.0.1", port))
    try:
        assert netfault.client_ports(os.getpid(), port) == [c.getsockname()[1]]
        assert netfault.client_ports(os.getpid(), port + 1 if port < 65535 else 1) == []
        assert netfault.client_ports(2 ** 22 + 12345, port) == []  # no such process
    finally:
        c.close()
        srv.close()
