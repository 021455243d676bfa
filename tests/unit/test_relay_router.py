"""RelayRouter (routing/relay.py) against a stand-in of the relay's control socket
(tests/unit/fake_relay.py): the route read from `status`, the flip `move NEW; release` journaled
before it is sent with its marker last, changes in doubt settled from the marker or a restart,
clear errors when the socket is missing, refuses or does not answer."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Iterator

import pytest

from dbmigrate.routing.base import RouteIntent, RouterError, RouterGone, RouterNoAnswer, ServerRef
from dbmigrate.routing.relay import RelayRouter
from tests.unit.fake_relay import FakeRelay

OLD, NEW = ServerRef("db1", "127.0.0.1", 3301), ServerRef("db2", "127.0.0.1", 3302)


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[FakeRelay]:
    r = FakeRelay(tmp_path / "relay.sock", OLD.address)
    yield r
    r.close()


class Log:
    def __init__(self, relay: FakeRelay) -> None:
        self.relay = relay
        self.events: list[tuple[str, RouteIntent, int]] = []

    def sent(self, intent: RouteIntent) -> None:
        self.events.append(("sent", intent, len(self.relay.lines)))  # how many lines the relay had seen

    def answered(self, intent: RouteIntent) -> None:
        self.events.append(("answered", intent, len(self.relay.lines)))


def test_current_reads_the_backend_from_status(relay: FakeRelay) -> None:
    st = RelayRouter("c1", relay.path).current()
    assert st.writer == OLD.address and st.writers == [OLD.address]
    assert st.details["relay"]["generation"] == 1
    ok, reason, _ = RelayRouter("c1", relay.path).verify(OLD)
    assert ok, reason


def test_the_switch_is_move_then_release_journaled_before_it_is_sent_with_its_marker_last(relay: FakeRelay) -> None:
    router, log = RelayRouter("c1", relay.path), Log(relay)
    st = router.switch_writer(NEW, OLD, log=log, seq=1234)
    assert st.writer == NEW.address and relay.generation == 2 and relay.seq == 1234
    assert relay.lines[-1] == f"move {NEW.address}; release; seq 1234"
    (what1, intent, seen_at_sent), (what2, _, seen_at_answer) = log.events
    assert (what1, what2) == ("sent", "answered")
    assert seen_at_sent == seen_at_answer - 1  # journaled before the line reached the relay
    assert intent.request == f"move {NEW.address}; release; seq 1234"
    assert intent.back == f"move {OLD.address}; release"
    assert "socat stdio UNIX-CONNECT:" in intent.finish_by_hand()


def test_a_switch_to_the_current_backend_sends_nothing(relay: FakeRelay) -> None:
    router, log = RelayRouter("c1", relay.path), Log(relay)
    router.switch_writer(OLD, NEW, log=log, seq=5)
    assert log.events == [] and all(not line.startswith("move") for line in relay.lines)


def test_a_switch_from_a_writer_the_relay_does_not_have_is_refused(relay: FakeRelay) -> None:
    relay.backend = "127.0.0.1:3309"
    with pytest.raises(RouterError, match="not to db1"):
        RelayRouter("c1", relay.path).switch_writer(NEW, OLD)
    assert relay.backend == "127.0.0.1:3309"


def test_settled_from_the_marker_or_a_relay_started_after_the_change(relay: FakeRelay) -> None:
    router = RelayRouter("c1", relay.path)
    seq = relay.started_ms + 1000  # numbered (sent) after this relay started
    assert not router.settled(seq)
    relay.seq = seq
    assert router.settled(seq)
    relay.seq = 0
    relay.started_ms = seq + 1  # a relay started after the change was sent: its process is gone
    assert router.settled(seq)


def test_a_missing_socket_is_gone(tmp_path: Path) -> None:
    with pytest.raises(RouterGone, match="does not exist"):
        RelayRouter("c1", str(tmp_path / "nothing.sock")).current()


def test_a_socket_nobody_listens_on_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # the file stays, nothing listens: a relay killed with -9
    with pytest.raises(RouterGone, match="refused"):
        RelayRouter("c1", str(path)).current()


def test_a_change_sent_without_an_answer_is_in_doubt(relay: FakeRelay) -> None:
    relay.mute = True
    router = RelayRouter("c1", relay.path, timeout=0.3)
    relay.mute = False
    router.current()
    relay.mute = True
    with pytest.raises(RouterNoAnswer, match="may still run it"):
        router.send_change(["hold"], ["release"], seq=7)


def test_a_refused_command_is_a_router_error(relay: FakeRelay) -> None:
    with pytest.raises(RouterError, match="refused"):
        RelayRouter("c1", relay.path).send_change(["frobnicate"])


def test_describe_switch_says_what_would_be_sent(relay: FakeRelay) -> None:
    router = RelayRouter("c1", relay.path)
    assert f"move {NEW.address}; release" in router.describe_switch(NEW, OLD)[0]
    assert "already" in router.describe_switch(OLD)[0]
    assert relay.backend == OLD.address


def test_router_for_builds_the_relay_from_the_inventory(tmp_path: Path) -> None:
    from dbmigrate.config import load_inventory
    from dbmigrate.routing import router_for

    inv = tmp_path / "inventory.yaml"
    inv.write_text(
        "defaults:\n  credentials: {defaults_file: c.cnf, group: client}\n"
        "clusters:\n  c1:\n    servers:\n      db1: {host: 127.0.0.1, port: 3301}\n"
        "    router: {kind: relay, address: '127.0.0.1:6033', control_socket: run/relay.sock}\n")
    router = router_for(load_inventory(inv), "c1")
    assert isinstance(router, RelayRouter)
    assert router.control.path == str(tmp_path / "run" / "relay.sock") and router.address == "127.0.0.1:6033"


def test_a_change_in_doubt_is_fenced_off_and_refused_if_it_lands_later(relay: FakeRelay) -> None:
    router = RelayRouter("c1", relay.path)
    assert router.can_fence_off
    router.send_change(["seq 40"])
    assert router.fence_off(50) is False  # never reached the relay: it says so, and fences it off
    late = router.control.request([f"move {NEW.address}", "release", "seq 50"])
    assert late["ok"] is False and "stale" in late["error"] and relay.backend == OLD.address
    router.send_change([f"move {NEW.address}", "release"], seq=60)
    assert router.fence_off(60) is True  # it ran before the fence


def test_a_relay_that_cannot_say_whether_the_change_ran_is_an_error(relay: FakeRelay, monkeypatch) -> None:
    router = RelayRouter("c1", relay.path)
    monkeypatch.setattr(router.control, "request", lambda cmds: {"ok": True, "status": relay.status()})
    with pytest.raises(RouterError, match="no seq_before"):
        router.fence_off(50)
