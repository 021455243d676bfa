"""Ending a demoted writer's sessions each when idle, and only those of the writer route
(decided on a fake server and a fake clock); the parsers it relies on (HAProxy's `show sess
all`, InnoDB's live transaction list); how the application's pools classify what they see."""

from __future__ import annotations

from dbmigrate.db.readers.sessions import Session, parse_active_transactions
from dbmigrate.clock import FakeClock
from dbmigrate.procedures.kit.drain import end_when_idle
from dbmigrate.rehearsal.clients.pools import classify
from dbmigrate.routing.haproxy_hold import route_sessions


class Busy:
    """A server whose sessions are busy for a number of looks, then idle; some in a transaction."""

    login_user = "dbmigrate"

    def __init__(self, sessions: dict[int, tuple[str, int]], in_trx: set[int] = frozenset()):
        self.left = dict(sessions)  # id -> (host, looks while busy)
        self.in_trx = set(in_trx)
        self.killed: list[int] = []
        self.killed_busy: list[int] = []

    def sessions(self) -> list[Session]:
        out = []
        for i, (host, busy) in list(self.left.items()):
            out.append(Session(i, "app", host, None, "Query" if busy > 0 else "Sleep", 0, ""))
            self.left[i] = (host, busy - 1)
        return out

    def sessions_in_transaction(self) -> set[int]:
        return set(self.in_trx)

    # the applier's side
    def kill_if_idle(self, ids: list[int]) -> bool:
        for i in ids:
            if i in self.left and self.left[i][1] <= 0:
                self.killed.append(i)
                del self.left[i]
        return True

    def kill_connection(self, id_: int) -> None:
        if self.left.get(id_, ("", 0))[1] > 0 or id_ in self.in_trx:
            self.killed_busy.append(id_)
        self.killed.append(id_)
        self.left.pop(id_, None)


def test_each_session_is_ended_only_once_idle_and_readers_are_left_alone():
    srv = Busy({1: ("127.0.0.1:5001", 0), 2: ("127.0.0.1:5002", 3), 3: ("127.0.0.1:6001", 0)})
    done = end_when_idle(srv, srv, frozenset({"dbmigrate"}), timeout_s=1.0,
                         only_hosts=lambda: {"127.0.0.1:5001", "127.0.0.1:5002"}, clock=FakeClock())
    assert sorted(srv.killed) == [1, 2] and srv.killed_busy == []
    assert done.ended_at_deadline == 0 and done.spared == 1
    assert 3 in srv.left  # the reader's session on the same server


def test_without_the_hold_the_reader_route_s_sessions_are_spared_and_every_other_one_ends():
    # A session that came neither through the writer route nor the reader route (connected
    # directly) is ended too: only the readers' sessions are known to stay valid there.
    srv = Busy({1: ("127.0.0.1:5001", 2), 2: ("10.0.0.9:40000", 0), 3: ("127.0.0.1:6001", 0)})
    done = end_when_idle(srv, srv, frozenset({"dbmigrate"}), timeout_s=1.0,
                         spare_hosts=lambda: {"127.0.0.1:6001"}, clock=FakeClock())
    assert sorted(srv.killed) == [1, 2] and srv.killed_busy == []
    assert done.spared == 1 and list(srv.left) == [3]


def test_a_transaction_gets_the_deadline_then_ends():
    srv = Busy({1: ("127.0.0.1:5001", 0), 2: ("127.0.0.1:5002", 0)}, in_trx={2})
    clock = FakeClock()
    done = end_when_idle(srv, srv, frozenset(), timeout_s=0.5, clock=clock)
    assert srv.killed == [1, 2] and srv.killed_busy == [2]
    assert done.ended_at_deadline == 1 and clock.monotonic() >= 0.5


class Lingering(Busy):
    """A server where a session ended stays listed as 'Killed' for a few looks before it leaves."""

    def __init__(self, sessions, looks: int = 3):
        super().__init__(sessions)
        self.looks, self.dying = looks, {}

    def sessions(self) -> list[Session]:
        out = super().sessions()
        for i, (host, left) in list(self.dying.items()):
            out.append(Session(i, "app", host, None, "Killed", 0, ""))
            self.dying[i] = (host, left - 1)
            if left <= 1:
                del self.dying[i]
        return out

    def kill_if_idle(self, ids: list[int]) -> bool:
        hosts = {i: self.left[i][0] for i in ids if i in self.left}
        super().kill_if_idle(ids)
        self.dying.update({i: (hosts[i], self.looks) for i in self.killed if i in hosts})
        return True


def test_a_session_ended_and_still_listed_as_killed_counts_as_ended_once():
    srv = Lingering({1: ("127.0.0.1:5001", 0)})
    done = end_when_idle(srv, srv, frozenset(), timeout_s=0.5, clock=FakeClock())
    assert srv.killed == [1]  # not ended again at the bound
    assert done.ended_idle == 1 and done.ended_at_deadline == 0


SESS = """0x1: [28/Nov/2026:02:23:11.546885] id=1 proto=tcpv4 source=127.0.0.1:52232
  frontend=writer (id=2 mode=tcp), listener=? (id=1) addr=127.0.0.1:27001
  backend=writer (id=3 mode=tcp) addr=127.0.0.1:54672
  server=a (id=1) addr=127.0.0.1:27011
0x2: [28/Nov/2026:02:23:11.548006] id=2 proto=tcpv4 source=127.0.0.1:52242
  frontend=readers (id=4 mode=tcp), listener=? (id=1) addr=127.0.0.1:27002
  backend=readers (id=5 mode=tcp) addr=127.0.0.1:54688
  server=a (id=1) addr=127.0.0.1:27011
0x3: [28/Nov/2026:02:23:11.553091] id=3 proto=unix_stream source=unix:1
  frontend=GLOBAL (id=0 mode=tcp), listener=? (id=1) addr=unix:1
  backend=<NONE> (id=-1 mode=-)
  server=<NONE> (id=-1)
"""


def test_show_sess_all_names_the_writer_routes_sessions_by_their_address_at_the_server():
    assert route_sessions(SESS, "writer") == {"127.0.0.1:54672": "127.0.0.1:27011"}
    assert route_sessions(SESS, "readers") == {"127.0.0.1:54688": "127.0.0.1:27011"}


INNODB = """LIST OF TRANSACTIONS FOR EACH SESSION:
---TRANSACTION 19, ACTIVE 0 sec
1 lock struct(s), heap size 1128, 0 row lock(s), undo log entries 1
MariaDB thread id 10, OS thread handle 140433754748608, query id 41 127.0.0.1 root
---TRANSACTION (0x7fb948eb2b80), not started
0 lock struct(s), heap size 1128, 0 row lock(s)
MariaDB thread id 11, OS thread handle 1, query id 2 127.0.0.1 app
--------
FILE I/O
"""


def test_live_transaction_list_keeps_active_ones_only():
    assert parse_active_transactions(INNODB) == {10}


def test_a_client_error_is_classed_gone_only_when_the_connection_was_dead_before_the_statement():
    assert classify(2013, found_dead=True) == "gone"
    assert classify(2013, found_dead=False) == "2013"
    assert classify(2055, found_dead=False) == "2013"
    assert classify(1290, found_dead=False) == "1290"
    assert classify(2006, found_dead=False) == "2006"
    assert classify(1062, found_dead=False) == "other"


def test_a_server_without_maxconn_gets_the_held_queue_before_its_limit_goes_back_to_none():
    from dbmigrate.routing.haproxy_hold import DEQUEUE_ALL, restore_commands

    # HAProxy 2.6.12 leaves queued connections stranded on `set maxconn server S 0` alone.
    assert restore_commands("writer", "db1", 0) == [f"set maxconn server writer/db1 {DEQUEUE_ALL}",
                                                     "set maxconn server writer/db1 0"]
    assert restore_commands("writer", "db1", 50) == ["set maxconn server writer/db1 50"]


def test_the_pools_connections_send_without_nagle_as_the_drivers_they_stand_for():
    import socket
    from types import SimpleNamespace

    from dbmigrate.rehearsal.clients.pools import no_delay

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        no_delay(SimpleNamespace(_socket=SimpleNamespace(sock=sock)))
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    no_delay(SimpleNamespace())  # no socket kept there: nothing to set
