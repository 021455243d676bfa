"""The writes that give a rehearsal server a captured shape: its CREATE statements, generated
rows and its accounts with their grants. Through the applier, so each is tagged and logged
(a password only ever travels as a parameter, registered with the redactor)."""

from __future__ import annotations

import re
from typing import Any, Sequence

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import Server

_GRANTEE = re.compile(r"\s+TO\s+(?:`(?:[^`]|``)+`|'(?:[^']|'')+'|[\w.-]+)@(?:`(?:[^`]|``)*`|'(?:[^']|'')*'|[\w.%-]+)",
                      re.IGNORECASE)
_IDENTIFIED = re.compile(r"\s+IDENTIFIED\s+(?:BY|VIA|WITH)\s.*?(?=\s+WITH\s+(?:GRANT|MAX_)|$)",
                         re.IGNORECASE | re.DOTALL)
# One INSERT carries at most this much: under max_allowed_packet (16 MB by default) with room.
BATCH_BYTES = 2 * 1024 * 1024


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def grant_for_any_host(line: str, user: str) -> str | None:
    """A captured GRANT line (SHOW GRANTS, secrets redacted) for `user`@'%': the captured host
    may not match the rehearsal's loopback clients. None for a line that grants nothing to
    replay (USAGE alone)."""
    if re.match(r"^\s*GRANT\s+USAGE\s+ON\s+\*\.\*\s", line, re.IGNORECASE):
        return None
    if not re.search(r"\sON\s", line, re.IGNORECASE) or re.match(r"^\s*GRANT\s+PROXY\s", line, re.IGNORECASE):
        return None  # a role granted to the account, or PROXY: not part of a captured shape
    line = _IDENTIFIED.sub("", line)
    return _GRANTEE.sub(" TO " + _ident(user) + "@'%'", line, count=1)


class ShapeWriter:
    def __init__(self, server: Server):
        self.applier = Applier(server)

    def foreign_key_checks(self, on: bool) -> None:
        self.applier.sql(f"SET SESSION foreign_key_checks={1 if on else 0}")

    def create_object(self, schema: str, statement: str) -> None:
        """A captured CREATE statement (table, view, routine, trigger, event) in its schema."""
        self.applier.sql(f"CREATE DATABASE IF NOT EXISTS {_ident(schema)}")
        self.applier.sql(f"USE {_ident(schema)}")
        self.applier.sql(statement)

    def insert_rows(self, schema: str, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> int:
        """Multi-row INSERTs of at most BATCH_BYTES each; the number of rows inserted."""
        head = f"INSERT INTO {_ident(schema)}.{_ident(table)} ({', '.join(_ident(c) for c in columns)}) VALUES "
        one = "(" + ", ".join(["%s"] * len(columns)) + ")"
        if not columns:
            head, one = f"INSERT INTO {_ident(schema)}.{_ident(table)} () VALUES ", "()"
        done, batch, size = 0, [], 0
        for row in rows:
            batch.append(row)
            size += sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row)
            if size >= BATCH_BYTES or len(batch) >= 1000:
                done += self._insert(head, one, batch)
                batch, size = [], 0
        if batch:
            done += self._insert(head, one, batch)
        return done

    def _insert(self, head: str, one: str, batch: list[tuple[Any, ...]]) -> int:
        params: list[Any] = [v for row in batch for v in row]
        self.applier.sql(head + ", ".join([one] * len(batch)), tuple(params))
        return len(batch)

    def create_account(self, user: str, password: str) -> None:
        self.applier.create_user(user, password)

    def grant(self, line: str) -> None:
        """A GRANT line from grant_for_any_host."""
        self.applier.replay_account_statement(line)

    def create_role(self, name: str, host: str) -> None:
        self.applier.sql("CREATE ROLE IF NOT EXISTS " + self.applier.flavor.role_account(name, host))

    def grant_role(self, name: str, host: str, to_user: str, to_host: str) -> None:
        """A role to an account (`to_host` '%'), or to another role (MariaDB: `to_host` '')."""
        role = self.applier.flavor.role_account(name, host)
        if to_host or self.applier.flavor.name != "mariadb":
            self.applier.sql(f"GRANT {role} TO %s@%s", (to_user, to_host or "%"))
        else:
            self.applier.sql(f"GRANT {role} TO %s", (to_user,))

    def set_default_role(self, name: str, host: str, user: str) -> None:
        self.applier.sql(self.applier.flavor.set_default_role_sql(self.applier.flavor.role_account(name, host)),
                         (user, "%"))

    def grant_proxy(self, proxied_user: str, proxied_host: str, user: str, with_grant: bool) -> None:
        self.applier.sql("GRANT PROXY ON %s@%s TO %s@%s" + (" WITH GRANT OPTION" if with_grant else ""),
                         (proxied_user, proxied_host, user, "%"))


def role_privilege_line(line: str) -> str | None:
    """A role's SHOW GRANTS line replayed as it is (its grantee is the role's name), or None for
    one that grants nothing to replay (USAGE alone) or grants a role (replayed as a role grant)."""
    if re.match(r"^\s*GRANT\s+USAGE\s+ON\s+\*\.\*\s", line, re.IGNORECASE):
        return None
    if not re.search(r"\sON\s", line, re.IGNORECASE) or re.match(r"^\s*GRANT\s+PROXY\s", line, re.IGNORECASE):
        return None
    return line
