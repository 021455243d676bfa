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

from dbmigrate.db.credentials import Credentials, quote_option_value
from dbmigrate.db.flavor import MARIADB
from dbmigrate.topology.wire import Account as WiredAccount

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
        text += f"\n[{a.group}]\nuser={quote_option_value(a.user)}\npassword={quote_option_value(a.password)}\n"
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


def bootstrap_accounts(accounts: dict[str, Account]) -> list[WiredAccount]:
    """The accounts created once on a new primary (replicas receive them through
    replication), with their grants; the application schemas are created first.
    The sandbox runs MariaDB only."""
    a, r, p = accounts["admin"], accounts["repl"], accounts["app"]
    return [
        WiredAccount(Credentials(a.user, a.password), ("ALL PRIVILEGES ON *.*",)),
        WiredAccount(Credentials(r.user, r.password), (MARIADB.replication_grants(),)),
        WiredAccount(Credentials(p.user, p.password), tuple(f"ALL PRIVILEGES ON `{s}`.*" for s in APP_SCHEMAS)),
    ]
