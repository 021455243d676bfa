"""A statement given up on during a real partition (iptables DROP on one sandbox server's port),
on a real server: without settling, the abandoned change lands after the heal; with it (the
handle's rule), the session is ended first and the change never lands."""

from __future__ import annotations

import shutil
import subprocess
import time
from contextlib import contextmanager
from typing import Iterator

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.db.connection import Server, Unresponsive
from dbmigrate.db.ledger import SafetyLedger

def _can_partition() -> bool:
    return shutil.which("iptables") is not None and \
        subprocess.run(["iptables", "-w", "-S", "INPUT"], capture_output=True).returncode == 0


pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not _can_partition(), reason="needs iptables and the right to use it (root)"),
]

# Long enough for the kernel to retransmit the abandoned request after the heal (RTO backoff).
LANDS_WITHIN_S = 8.0


@contextmanager
def partitioned(port: int) -> Iterator[None]:
    """Drop every packet to `port` (a server this test started) until the block ends."""
    rule = ["INPUT", "-p", "tcp", "--dport", str(port), "-j", "DROP"]
    subprocess.run(["iptables", "-w", "-I", *rule], check=True)
    try:
        yield
    finally:
        subprocess.run(["iptables", "-w", "-D", *rule], check=True)


@pytest.fixture(scope="module")
def ledger() -> SafetyLedger:
    """The module's own (a process's is shared by every handle it opens, as these are)."""
    return SafetyLedger()


@pytest.fixture(scope="module")
def replica(make_sandbox, ledger):
    state = make_sandbox("doubt", 1)
    inv = load_inventory(state.inventory_file)
    name = "doubt-2"
    spec = inv.cluster("doubt").servers[name]
    return lambda: Server(name, spec.host, spec.port, inv.credentials_for(spec), ledger=ledger)


def give_up_on_open(server: Server) -> None:
    with partitioned(server.port):
        with pytest.raises(Unresponsive) as gave_up:
            with server.bounded(1.0):
                server.execute("SET GLOBAL read_only=OFF")
        assert gave_up.value.in_doubt is not None
        time.sleep(1.0)  # the partition lasts past the bound, as in the measurement


def read_only_over(server: Server, seconds: float) -> set[int]:
    seen = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        seen.add(int(server.scalar("SELECT @@GLOBAL.read_only")))
        time.sleep(0.1)
    return seen


def test_an_abandoned_change_lands_after_the_heal_when_nobody_ends_its_session(replica, ledger):
    """The hazard itself, so that the next test is known to test something."""
    with replica() as s:
        s.execute("SET GLOBAL read_only=ON")
        give_up_on_open(s)
        ledger.in_doubt.clear()  # forget the doubt: what a tool without the rule would do
    with replica() as fresh:
        try:
            assert 0 in read_only_over(fresh, LANDS_WITHIN_S), "the abandoned read_only=OFF never landed"
        finally:
            fresh.execute("SET GLOBAL read_only=ON")


def test_the_next_statement_ends_the_doubtful_session_first_and_the_change_never_lands(replica, ledger):
    with replica() as s:
        s.execute("SET GLOBAL read_only=ON")
        give_up_on_open(s)
        assert ledger.in_doubt.pending(s.address)
    with replica() as fresh:  # another handle, as a later step's would be
        assert read_only_over(fresh, LANDS_WITHIN_S) == {1}
        assert ledger.in_doubt.pending(fresh.address) == []
