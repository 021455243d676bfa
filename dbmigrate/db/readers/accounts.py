"""Reads of accounts: grants, roles, and who can reach or write a schema."""

from __future__ import annotations

from typing import Any

from dbmigrate.db.grants import like_matches
from dbmigrate.db.readers.base import Reader


class AccountReader(Reader):
    def own_grants(self) -> list[str]:
        """SHOW GRANTS of the account this session logged in as."""
        rows = self.server.query("SHOW GRANTS FOR CURRENT_USER()")
        return [next(iter(r.values())) for r in rows]

    def grants(self, user: str, host: str = "%") -> list[str]:
        rows = self.server.query("SHOW GRANTS FOR %s@%s", (user, host))
        return [next(iter(r.values())) for r in rows]

    def role_grants(self, role: str) -> list[str]:
        rows = self.server.query("SHOW GRANTS FOR %s", (role,))
        return [next(iter(r.values())) for r in rows]

    def user_exists(self, user: str) -> bool:
        return bool(self.server.scalar("SELECT COUNT(*) AS n FROM mysql.user WHERE User=%s", (user,)))

    def account_exists(self, user: str, host: str) -> bool:
        return bool(self.server.scalar("SELECT COUNT(*) AS n FROM mysql.user WHERE User=%s AND Host=%s",
                                       (user, host)))

    def native_password_hashes(self) -> list[tuple[str, str]]:
        """(user, `*HEX` hash) of every mysql_native_password account: the relay's users file
        (relay/, docs/internals/relay.md), hashes only, never a password."""
        rows = self.server.query("SELECT User AS u, authentication_string AS h FROM mysql.user "
                                 "WHERE plugin='mysql_native_password'")
        return [(str(r["u"]), str(r["h"] or "")) for r in rows]

    def user_hosts(self, user: str) -> list[str]:
        """Host parts of the accounts named `user` (for SHOW GRANTS FOR user@host)."""
        rows = self.server.query("SELECT Host AS h FROM mysql.user WHERE User=%s ORDER BY Host", (user,))
        return [str(r["h"]) for r in rows]

    def create_user_statement(self, user: str, host: str) -> str:
        """SHOW CREATE USER: the account as a statement another server can replay (it may carry a hash)."""
        return str(self.server.scalar("SHOW CREATE USER %s@%s", (user, host)))

    def privilege_holders(self, schemas: list[str], include_global: bool, roles: bool = False) -> list[tuple[str, str]]:
        """(user, host) of every account with a privilege on one of `schemas`, at any level:
        schema (a LIKE pattern that covers it counts), table, column, routine, and global when
        asked. Roles (MariaDB: an empty host) and anonymous accounts are left out; with
        `roles`, only the roles are returned, as (role, '')."""
        if not schemas:
            return []
        found: set[tuple[str, str]] = set()
        for r in self.server.query("SELECT User AS u, Host AS h, Db AS d FROM mysql.db WHERE User <> ''"):
            if any(like_matches(str(r["d"]), s) for s in schemas):
                found.add((str(r["u"]), str(r["h"])))
        marks = ", ".join(["%s"] * len(schemas))
        for table in ("tables_priv", "columns_priv", "procs_priv"):
            for r in self.server.query(f"SELECT DISTINCT User AS u, Host AS h FROM mysql.{table} "
                                       f"WHERE User <> '' AND Db IN ({marks})", tuple(schemas)):
                found.add((str(r["u"]), str(r["h"])))
        if include_global:
            for r in self.server.query(
                    "SELECT User AS u, Host AS h FROM mysql.user WHERE User <> '' AND Host <> '' AND "
                    "(Select_priv='Y' OR Insert_priv='Y' OR Update_priv='Y' OR Delete_priv='Y')"):
                found.add((str(r["u"]), str(r["h"])))
        return sorted(a for a in found if (a[1] == "") == roles)  # MariaDB's roles have an empty host

    # What can change an application's data or tables: the privilege columns of mysql.user and
    # mysql.db, and the values of tables_priv's and columns_priv's SETs that do.
    _WRITE_COLUMNS = ("Insert_priv", "Update_priv", "Delete_priv", "Create_priv", "Drop_priv", "Alter_priv",
                      "Index_priv", "Create_view_priv", "Trigger_priv")
    _WRITE_TABLE_PRIVS = ("Insert", "Update", "Delete", "Create", "Drop", "Alter", "Index", "Create View", "Trigger")
    _WRITE_COLUMN_PRIVS = ("Insert", "Update")

    def schema_writers(self, schemas: list[str]) -> dict[tuple[str, str], set[str]]:
        """(user, host) -> the levels at which it can write one of `schemas`: 'global', 'schema'
        (a LIKE pattern that covers it counts), 'table', 'column', and 'role R' for a write
        privilege held through role R (granted directly or through another role). Anonymous
        accounts are left out; roles appear only through their members."""
        any_write = " OR ".join(f"{c}='Y'" for c in self._WRITE_COLUMNS)
        found: dict[tuple[str, str], set[str]] = {}

        def add(user: Any, host: Any, level: str) -> None:
            found.setdefault((str(user), str(host)), set()).add(level)

        for r in self.server.query(f"SELECT User AS u, Host AS h FROM mysql.user WHERE User <> '' AND ({any_write})"):
            add(r["u"], r["h"], "global")
        for r in self.server.query(f"SELECT User AS u, Host AS h, Db AS d FROM mysql.db WHERE User <> '' AND "
                                   f"({any_write})"):
            if any(like_matches(str(r["d"]), s) for s in schemas):
                add(r["u"], r["h"], "schema")
        if schemas:
            marks = ", ".join(["%s"] * len(schemas))
            for table, column, privs, level in (("tables_priv", "Table_priv", self._WRITE_TABLE_PRIVS, "table"),
                                                ("columns_priv", "Column_priv", self._WRITE_COLUMN_PRIVS, "column")):
                writes = " OR ".join(f"FIND_IN_SET('{p}', {column})" for p in privs)
                for r in self.server.query(f"SELECT DISTINCT User AS u, Host AS h FROM mysql.{table} "
                                           f"WHERE User <> '' AND Db IN ({marks}) AND ({writes})", tuple(schemas)):
                    add(r["u"], r["h"], level)
        # MariaDB's roles have an empty host: their writes reach the users that hold them.
        roles = {u for u, h in found if h == ""}
        users = {a: levels for a, levels in found.items() if a[1] != ""}
        edges_sql = self.flavor.role_edges_sql()
        if roles and edges_sql:
            edges = [(str(r["user"]), str(r["host"]), str(r["role"])) for r in self.server.query(edges_sql)]
            via = {r: r for r in roles}  # role -> the writing role it leads to
            while True:
                more = {u: via[role] for u, h, role in edges if h == "" and role in via and u not in via}
                if not more:
                    break
                via.update(more)
            for user, host, role in edges:
                if host and role in via:
                    users.setdefault((user, host), set()).add(f"role {via[role]}")
        return users

    def role_members(self, roles: set[str]) -> list[tuple[str, str, str]]:
        """(user, host, role) for every grant of one of `roles`, and of a role that holds one of
        them, to a user or another role (a role's host is '')."""
        if not roles:
            return []
        edges = [(str(r["user"]), str(r["host"]), str(r["role"]))
                 for r in self.server.query("SELECT User AS user, Host AS host, Role AS role FROM mysql.roles_mapping")]
        wanted, out = set(roles), list[tuple[str, str, str]]()
        while True:
            more = [e for e in edges if e[2] in wanted and e not in out]
            if not more:
                return sorted(out)
            out += more
            wanted |= {u for u, h, _ in more if h == ""}

    def role_exists(self, role: str) -> bool:
        return bool(self.server.scalar("SELECT COUNT(*) AS n FROM mysql.user WHERE User=%s AND Host='' AND "
                                       "is_role='Y'", (role,)))

    def default_role(self, user: str, host: str) -> str:
        """The role a user's sessions start with ('' for none)."""
        return str(self.server.scalar("SELECT default_role AS r FROM mysql.user WHERE User=%s AND Host=%s",
                                      (user, host)) or "")
