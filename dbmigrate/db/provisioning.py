"""SQL that provisioning runs on a freshly created instance through its local socket
(as root, by the `mariadb` client): the tool's own accounts, without binlogging them,
so that the instance has no transactions of its own when it starts replicating."""

from __future__ import annotations

from dataclasses import dataclass

from dbmigrate.db.flavor import MARIADB


@dataclass(frozen=True)
class ProvisionedAccount:
    user: str
    password: str
    privileges_on: tuple[str, ...]  # "PRIVILEGES ON what", from the tool, never from input
    grant_option: bool = False


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def tool_accounts(admin_user: str, admin_password: str, repl_user: str, repl_password: str) -> list[ProvisionedAccount]:
    """The admin account (everything: the tool itself) and the replication account (the
    old servers replicate back from the instance for rollback)."""
    return [ProvisionedAccount(admin_user, admin_password, ("ALL PRIVILEGES ON *.*",), grant_option=True),
            ProvisionedAccount(repl_user, repl_password, (MARIADB.replication_grants(),))]


def accounts_script(accounts: list[ProvisionedAccount]) -> str:
    """Idempotent: creates what is missing, sets the password and grants of what exists."""
    lines = ["SET SESSION sql_log_bin=0;"]
    for a in accounts:
        who = f"{_literal(a.user)}@'%'"
        lines.append(f"CREATE USER IF NOT EXISTS {who} IDENTIFIED BY {_literal(a.password)};")
        lines.append(f"ALTER USER {who} IDENTIFIED BY {_literal(a.password)};")
        for grant in a.privileges_on:
            lines.append(f"GRANT {grant} TO {who}{' WITH GRANT OPTION' if a.grant_option else ''};")
    return "\n".join(lines) + "\n"


def count_accounts_query(users: list[str]) -> str:
    """How many of `users` exist (no secret in it: it may go on a command line)."""
    names = ", ".join(_literal(u) for u in users)
    return f"SELECT COUNT(*) FROM mysql.user WHERE Host = '%' AND User IN ({names})"
