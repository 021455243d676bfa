"""Each server handle keeps its promises in the ledger it was given: the process's by default, so
that every connection of the process sees the same doubts and carries the same generations."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dbmigrate.db.connection import InDoubtUnsettled, Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.db.ledger import SafetyLedger, process_ledger

OPEN = "SET GLOBAL read_only=OFF"


def handle(ledger: SafetyLedger | None = None) -> Server:
    creds = Credentials("dbmigrate", "secret")
    if ledger is None:
        return Server("db2", "127.0.0.1", 3302, creds)
    return Server("db2", "127.0.0.1", 3302, creds, ledger=ledger)


def test_a_handle_keeps_the_process_ledger_unless_given_one_and_its_sessions_share_it():
    assert handle().ledger is process_ledger()
    assert handle().dedicated().ledger is process_ledger()
    mine = SafetyLedger()
    srv = handle(mine)
    assert srv.ledger is mine and srv.dedicated().ledger is mine
    assert srv.waiter(5).ledger is mine and srv.watcher(5).ledger is mine
    assert handle(SafetyLedger()) == handle()  # the ledger is not part of what a handle is


def test_a_change_given_up_on_is_in_doubt_in_the_handles_ledger_and_every_handle_on_it_sees_it():
    mine = SafetyLedger()
    srv = handle(mine)
    doubt = srv._give_up(SimpleNamespace(connection_id=41), OPEN, OPEN)  # noqa: SLF001 (the answer was lost)
    assert doubt is not None and mine.in_doubt.pending(srv.address) == [doubt]
    assert process_ledger().in_doubt.pending(srv.address) == []
    other = handle(mine)  # another step's handle on the same address, same ledger
    with other.bounded(0), pytest.raises(InDoubtUnsettled) as unsettled:
        other.settle_doubts()  # the bound is spent: nothing is sent, the doubt stays
    assert unsettled.value.doubt == doubt and mine.in_doubt.pending(srv.address) == [doubt]
    with handle(SafetyLedger()).bounded(0) as clean:
        clean.settle_doubts()  # nothing in doubt in its own ledger: nothing to settle


def test_a_read_given_up_on_is_not_in_doubt():
    mine = SafetyLedger()
    assert handle(mine)._give_up(SimpleNamespace(connection_id=41), "SELECT 1", "SELECT 1") is None  # noqa: SLF001
    assert mine.in_doubt.all() == []
