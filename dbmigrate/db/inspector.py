"""All reads of server state go through here: one method per question, written in the reader of
its subject (db/readers/: replication, sessions, schema, accounts, status).

Inspector inherits every reader (multiple inheritance): each read is written once, in its reader,
an Inspector is each of them (a function can ask for just the SessionReader it uses and still be
given an Inspector), and a reader that needs another's read composes that reader, so each one
stands alone."""

from __future__ import annotations

from dbmigrate.db.readers.accounts import AccountReader
from dbmigrate.db.readers.replication import ReplicationReader
from dbmigrate.db.readers.schema import SchemaReader
from dbmigrate.db.readers.sessions import (HeavyWork, LockHolder, Session, SessionReader, bypassing_users,
                                           grants_bypass, is_ddl)
from dbmigrate.db.readers.status import StatusReader

__all__ = ["Inspector", "Session", "HeavyWork", "LockHolder", "is_ddl", "grants_bypass", "bypassing_users"]


class Inspector(ReplicationReader, SessionReader, SchemaReader, AccountReader, StatusReader):
    """Every read of a server, for callers that ask more than one subject."""
