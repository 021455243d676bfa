"""The one session-drain rule: whom a drain never waits for nor ends, how long it waits,
and when it ends the sessions left (decided on a fake server, driven by a fake clock)."""

from __future__ import annotations

from dbmigrate.db.connection import QueryError
from dbmigrate.db.inspector import Session
from dbmigrate.clock import FakeClock
from dbmigrate.procedures.kit.drain import SERVER_THREADS, drain, protected_users


def session(id_: int, user: str) -> Session:
    return Session(id_, user, "127.0.0.1", None, "Sleep", 0, "")


class FakeServer:
    """Sessions and open transactions that end after a number of polls."""

    login_user = "dbmigrate"

    def __init__(self, sessions: list[Session], open_trx: dict[int, int] | None = None, gone: set[int] = frozenset()):
        self._sessions = {s.id: s for s in sessions}
        self._trx = dict(open_trx or {})  # session id -> polls until its transaction ends
        self._gone = set(gone)  # ended by themselves just before the KILL
        self.killed: list[int] = []

    def open_transactions(self) -> list[tuple[int, str]]:
        out = [(i, self._sessions[i].user) for i, left in self._trx.items() if left > 0]
        self._trx = {i: left - 1 for i, left in self._trx.items()}
        return out

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    def kill_connection(self, id_: int) -> None:
        if id_ in self._gone:
            raise QueryError("Unknown thread id", errno=1094)
        self.killed.append(id_)


def test_protected_users_are_the_tool_replication_server_threads_and_admins():
    assert protected_users(FakeServer([]), "repl", ["ops"]) == {"dbmigrate", "repl", "ops", *SERVER_THREADS}
    assert protected_users(FakeServer([]), None) == {"dbmigrate", *SERVER_THREADS}


def test_waits_for_client_transactions_then_ends_client_sessions_only():
    fake = FakeServer([session(1, "app"), session(2, "repl"), session(3, "dbmigrate"), session(4, "system user")],
                      open_trx={1: 3, 2: 100})
    clock = FakeClock()
    done = drain(fake, fake, protected_users(fake, "repl"), timeout_s=5, clock=clock)
    assert done.open_at_start == 1 and done.ended == 1 and fake.killed == [1]
    assert 0 < done.waited_s < 5  # it stopped waiting once the app transaction ended


def test_the_wait_is_bounded():
    fake = FakeServer([session(1, "app")], open_trx={1: 10_000})
    clock = FakeClock()
    done = drain(fake, fake, protected_users(fake, "repl"), timeout_s=2, clock=clock)
    assert 2 <= done.waited_s < 2.1 and fake.killed == [1]


def test_sessions_mode_waits_for_whole_sessions_and_may_leave_them():
    fake = FakeServer([session(1, "app"), session(2, "reporting")])
    done = drain(fake, fake, protected_users(fake, "repl"), timeout_s=1, until="sessions", end=False,
                 clock=FakeClock())
    assert [s.user for s in done.left] == ["app", "reporting"] and done.ended == 0 and fake.killed == []


def test_a_session_that_ended_by_itself_is_not_an_error():
    fake = FakeServer([session(1, "app"), session(2, "app")], gone={1})
    done = drain(fake, fake, protected_users(fake, "repl"), timeout_s=0, clock=FakeClock())
    assert done.ended == 1 and fake.killed == [2]


def test_transactions_are_polled_no_faster_than_innodb_refreshes_its_transaction_table():
    """INNODB_TRX is refreshed only when nobody read it for 0.1 s: polled faster, a transaction
    that ended would look open until the bound. Sessions (PROCESSLIST) are live."""
    fake = FakeServer([session(1, "app")], open_trx={1: 3})
    clock = FakeClock()
    drain(fake, fake, protected_users(fake, "repl"), timeout_s=5, clock=clock)
    assert clock.sleeps and min(clock.sleeps) > 0.1
    clock = FakeClock()
    drain(FakeServer([session(1, "app")]), FakeServer([]), frozenset(), timeout_s=0.05, until="sessions",
          end=False, clock=clock)
    assert clock.sleeps and max(clock.sleeps) <= 0.01


def test_idle_pooled_sessions_are_not_waited_for_when_they_may_be_ended():
    """A pool keeps its connections: an idle session without a transaction never closes by
    itself, so waiting for it only costs the whole bound. One with an open transaction is waited for."""
    clock = FakeClock()
    fake = FakeServer([session(1, "app"), session(2, "app")])
    done = drain(fake, fake, protected_users(fake, "repl"), timeout_s=30, until="sessions", clock=clock)
    assert clock.sleeps == [] and done.ended == 2 and done.idle == 2
    clock = FakeClock()
    fake = FakeServer([session(1, "app"), session(2, "app")], open_trx={2: 3})
    done = drain(fake, fake, protected_users(fake, "repl"), timeout_s=30, until="sessions", clock=clock)
    assert clock.sleeps and sum(clock.sleeps) < 1 and done.ended == 2
