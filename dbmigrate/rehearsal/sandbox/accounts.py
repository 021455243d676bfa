"""The three sandbox accounts and the option file that holds their passwords.

- admin: everything (the tool's own account);
- repl: replication only;
- app: rights on the application schemas only, so `read_only` fences it
  (no SUPER, no READ ONLY ADMIN).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

APP_SCHEMAS = ("app", "sbtest")


@dataclass(frozen=True)
class Account:
    group: str
    user: str
    password: str


def new_accounts() -> dict[str, Account]:
    return {
        "admin": Account("client-admin", "dbm_admin", secrets.token_urlsafe(18)),
        "repl": Account("client-repl", "dbm_repl", secrets.token_urlsafe(18)),
        "app": Account("client-app", "dbm_app", secrets.token_urlsafe(18)),
    }


def write_option_file(path: Path, accounts: dict[str, Account]) -> None:
    text = "# dbmigrate sandbox credentials (mode 0600)\n"
    for a in accounts.values():
        text += f"\n[{a.group}]\nuser={a.user}\npassword=\"{a.password}\"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def read_option_file(path: Path) -> dict[str, Account]:
    from dbmigrate.db.credentials import parse_option_file

    groups = parse_option_file(path)
    out = {}
    for role in ("admin", "repl", "app"):
        g = groups.get(f"client-{role}")
        if g:
            out[role] = Account(f"client-{role}", g["user"], g.get("password", ""))
    return out


def bootstrap_statements(accounts: dict[str, Account]) -> list[tuple[str, tuple]]:
    """Statements run once on a new primary; replicas receive them through replication."""
    a, r, p = accounts["admin"], accounts["repl"], accounts["app"]
    stmts: list[tuple[str, tuple]] = [
        ("CREATE USER %s@'%' IDENTIFIED BY %s", (a.user, a.password)),
        ("GRANT ALL PRIVILEGES ON *.* TO %s@'%' WITH GRANT OPTION", (a.user,)),
        ("CREATE USER %s@'%' IDENTIFIED BY %s", (r.user, r.password)),
        ("GRANT REPLICATION SLAVE, SLAVE MONITOR, BINLOG MONITOR ON *.* TO %s@'%'", (r.user,)),
        ("CREATE USER %s@'%' IDENTIFIED BY %s", (p.user, p.password)),
    ]
    for schema in APP_SCHEMAS:
        stmts.append((f"CREATE DATABASE IF NOT EXISTS `{schema}`", ()))
        stmts.append((f"GRANT ALL PRIVILEGES ON `{schema}`.* TO %s@'%'", (p.user,)))
    return stmts
