"""The HAProxy hold's router commands go through the run's journaled router like the flip: the
hold engages although the run wraps its router, each maxconn change is journaled before it is
sent (with the change marker), and none is sent while an earlier change is in doubt.

The admin socket is a stand-in that answers as HAProxy 2.6 does (measured facts in
routing/haproxy.py); the live hold is tested in tests/integration/test_what_the_application_sees.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from dbmigrate.procedures.kit.switchover.router import JournaledRouter, RouterInDoubt
from dbmigrate.routing import haproxy_hold
from dbmigrate.routing.haproxy import MARKER, HAProxyRouter
from tests.unit.fake_topology import ScheduledClock
from tests.unit.test_router_in_doubt import MemoryJournal


class Admin:
    """Records each request; keeps the change marker as HAProxy's process variable."""

    def __init__(self, journal: MemoryJournal) -> None:
        self.path, self.journal = "/run/haproxy.sock", journal
        self.requests: list[list[str]] = []
        self.journaled_before_sent: list[bool] = []
        self.marker: int | None = 0

    def request(self, cmds: list[str]) -> str:
        self.requests.append(list(cmds))
        if cmds == [f"get var {MARKER}"]:
            return f"{MARKER}: type=sint value=<{self.marker}>\n" if self.marker is not None else "Variable not found\n"
        self.journaled_before_sent.append(self.journal.change is not None)
        for c in cmds:
            if c.startswith(f"set var {MARKER} int("):
                self.marker = int(c.rsplit("(", 1)[1].rstrip(")"))
        return "\n"


def setup(wait_s: float = 5.0) -> tuple[HAProxyRouter, Admin, MemoryJournal, JournaledRouter]:
    clock, journal = ScheduledClock(), MemoryJournal()
    raw = HAProxyRouter("c1", "/run/haproxy.sock", clock=clock, writer_address="127.0.0.1:6033")
    admin = Admin(journal)
    raw.admin = admin  # type: ignore[assignment]
    return raw, admin, journal, JournaledRouter(raw, journal, clock, wait_s)


SAVED = {"backend": "writer", "server": "db1", "address": "127.0.0.1:3301", "maxconn_before": 0}


def test_the_hold_sees_the_haproxy_router_through_the_run_s_journaled_router():
    raw, _, _, journaled = setup()
    assert haproxy_hold.haproxy_of(journaled) is raw
    assert haproxy_hold.can_hold(journaled)
    assert haproxy_hold.haproxy_of(object()) is None and not haproxy_hold.can_hold(None)


def test_a_hold_left_by_a_dead_process_is_put_back_journaled_and_marked_like_the_flip():
    _, admin, journal, journaled = setup()
    said = haproxy_hold.release_leftover(journaled, SAVED)
    assert "maxconn back" in said
    change = [r for r in admin.requests if any("set maxconn" in c for c in r)]
    assert len(change) == 1
    assert change[0][:2] == ["experimental-mode on", f"set var {MARKER} int({journal.seq})"]
    assert change[0][2:] == haproxy_hold.restore_commands("writer", "db1", 0)
    assert admin.journaled_before_sent[-1] is True  # the intent was in the journal when it went out
    assert journal.change is None and admin.marker == journal.seq  # answered: nothing in doubt


def test_no_hold_command_is_sent_while_an_earlier_change_is_in_doubt():
    _, admin, journal, journaled = setup(wait_s=1.0)
    journal.sent({"seq": 10**15, "request": "set server writer/db2 state ready", "back": "", "to": "db2"})
    with pytest.raises(RouterInDoubt):
        haproxy_hold.release_leftover(journaled, SAVED)
    assert not any("set maxconn" in c for r in admin.requests for c in r)


def test_the_in_doubt_message_names_a_hold_change_not_a_writer_flip():
    _, admin, journal, journaled = setup(wait_s=0.5)
    restore = haproxy_hold.restore_commands("writer", "db1", 0)
    change: dict[str, Any] = {"seq": 10**15, "request": "set maxconn server writer/db1 1",
                              "back": "; ".join(restore), "what": "to hold new connections"}
    journal.sent(change)
    with pytest.raises(RouterInDoubt) as e:
        journaled.settle()
    assert "to hold new connections" in e.value.message and "put it back by hand" in e.value.message
    assert "send writes to None" not in e.value.message
