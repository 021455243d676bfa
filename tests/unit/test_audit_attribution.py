"""Who wrote past the fence: the seal ends every session but the tool's own (application sessions
included), so the audit names a writer only among the accounts that bypass read_only."""

from __future__ import annotations

from dbmigrate.db.binlog import BinlogTransaction
from dbmigrate.db.inspector import Session
from dbmigrate.procedures.kit.audit import attribute


def session(sid: int, user: str) -> Session:
    return Session(id=sid, user=user, host="10.0.0.9", db="app", command="Sleep", time=1, state=None)


def test_the_one_bypassing_account_among_the_ended_sessions_is_named_not_the_applications():
    trx = [BinlogTransaction(gtid="0-1-42")]
    attribute(trx, [session(11, "app"), session(12, "app"), session(13, "ops_admin")], {"ops_admin", "root"})
    assert trx[0].account == "ops_admin (the one account with a session past read_only, ended at the seal)"


def test_the_writing_session_named_by_the_binlog_wins_and_two_bypassing_accounts_stay_a_choice():
    named = BinlogTransaction(gtid="0-1-43", session_id=12)
    unnamed = BinlogTransaction(gtid="0-1-44")
    attribute([named, unnamed], [session(12, "root"), session(13, "ops_admin")], {"ops_admin", "root"})
    assert named.account == "root"
    assert unnamed.account == "one of ops_admin, root (accounts that bypass read_only)"


def test_a_session_idle_since_before_the_fence_is_not_taken_for_the_writer():
    """Three sessions of the tool's own account, left idle 3 s by another client, and one of
    ops_admin active at the seal, 40 ms after the fence was asked for: ops_admin wrote."""
    idle = [Session(id=i, user="dbm_admin", host="h", db=None, command="Sleep", time=3, state=None) for i in (32, 34, 36)]
    active = Session(id=59, user="ops_admin", host="h", db="app", command="Sleep", time=0, state=None)
    trx = [BinlogTransaction(gtid="0-1-45")]
    attribute(trx, [active, *idle], {"dbm_admin", "ops_admin", "root"}, since_fence_s=0.04)
    assert trx[0].account == "ops_admin (the one account with a session past read_only, ended at the seal)"
    unknown = [BinlogTransaction(gtid="0-1-46")]
    attribute(unknown, [active, *idle], {"dbm_admin", "ops_admin", "root"}, since_fence_s=None)
    assert unknown[0].account.startswith("one of dbm_admin, ops_admin, root")
