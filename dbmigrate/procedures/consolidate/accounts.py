"""The application accounts of the moved shards: copied with a logical seed, compared before a
cutover, and tried after it.

Every account with a privilege on a moved shard counts, at every level (schema, including a
LIKE pattern that covers it, table, column, routine; global ones when `seed.global_grants`
asks), not only the inventory's app account: a second application that loses its grants on
the new instance gets "Access denied" the moment its route moves."""

from __future__ import annotations

from dataclasses import dataclass, field

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.db.grants import GrantLine, canonical, like_matches, lines_for
from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import DbmigrateError

# Never copied nor compared: the server's own accounts.
SYSTEM_USERS = frozenset({"root", "mariadb.sys", "mysql.sys", "mysql.session", "mysql.infoschema", "PUBLIC"})


@dataclass
class Accounts:
    grants: dict[tuple[str, str], list[GrantLine]] = field(default_factory=dict)
    # Roles with a privilege on the shards (their grant lines), who holds them (user, host, role;
    # host '' for a role granted to a role) and each member's default role.
    roles: dict[str, list[GrantLine]] = field(default_factory=dict)
    members: list[tuple[str, str, str]] = field(default_factory=list)
    default_roles: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def users(self) -> list[tuple[str, str]]:
        """Every account that reaches the shards, directly or through a role."""
        return sorted(set(self.grants) | {(u, h) for u, h, _ in self.members if h})

    @property
    def writers(self) -> list[tuple[str, str]]:
        return [a for a, lines in self.grants.items() if any(g.writes for g in lines)]

    @property
    def role_writers(self) -> list[tuple[str, str]]:
        """Accounts that write the shards only through a role they hold (granted to them directly
        or through another role): read_only must stop them as much as the direct writers."""
        writing = {r for r, lines in self.roles.items() if any(g.writes for g in lines)}
        while True:
            more = {u for u, h, r in self.members if not h and r in writing and u not in writing}
            if not more:
                break
            writing |= more
        return sorted({(u, h) for u, h, r in self.members if h and r in writing} - set(self.writers))

    def names(self) -> str:
        return ", ".join([f"{u}@{h}" for u, h in self.users] + [f"role {r}" for r in self.roles]) or "none"


def shard_accounts(old: Inspector, shards: list[str], *, include_global: bool, exclude: set[str]) -> Accounts:
    found = Accounts()
    for user, host in old.privilege_holders(shards, include_global):
        if user in SYSTEM_USERS or user in exclude:
            continue
        lines = lines_for(old.grants(user, host), shards, include_global)
        if lines:
            found.grants[(user, host)] = lines
    for role, _ in old.privilege_holders(shards, include_global, roles=True):
        lines = lines_for(old.role_grants(role), shards, include_global)
        if lines:
            found.roles[role] = lines
    found.members = [(u, h, r) for u, h, r in old.role_members(set(found.roles))
                     if u not in SYSTEM_USERS and u not in exclude]
    for member in {(u, h) for u, h, _ in found.members if h}:
        found.default_roles[member] = old.default_role(*member)
    return found


def copy_accounts(old: Inspector, new: Inspector, apply: Applier, accounts: Accounts) -> int:
    """Each account created on the instance as it is on the old server (same authentication),
    then its grant lines on the shards replayed. Returns the grant lines replayed."""
    n = 0
    for (user, host), lines in accounts.grants.items():
        if not new.account_exists(user, host):
            apply.replay_account_statement(old.create_user_statement(user, host))
        for g in lines:
            apply.replay_account_statement(g.text)
            n += 1
    # Roles: created, given their grants on the shards, granted to their members as on the old
    # server, and each member's default role set, so that its sessions start with it.
    for role, lines in accounts.roles.items():
        apply.create_role(role)
        for g in lines:
            apply.replay_account_statement(g.text)
            n += 1
    for user, host, role in accounts.members:
        if host and not new.account_exists(user, host):
            apply.replay_account_statement(old.create_user_statement(user, host))
        elif not host:
            apply.create_role(user)
        apply.grant_role(role, user, host)
        n += 1
    for (user, host), role in accounts.default_roles.items():
        if role:
            apply.set_default_role(role, user, host)
    return n


def differences(old: Inspector, new: Inspector, accounts: Accounts, shards: list[str]) -> list[str]:
    """What would keep an account from logging in to the instance or reaching its tables there:
    missing, another authentication, a grant line missing, a granted table missing."""
    problems = []
    tables = {s: set(new.base_tables(s)) for s in shards}
    for (user, host), lines in accounts.grants.items():
        who = f"{user}@{host}"
        if not new.account_exists(user, host):
            problems.append(f"{who} does not exist on {new.server.name}")
            continue
        if old.create_user_statement(user, host) != new.create_user_statement(user, host):
            problems.append(f"{who} authenticates differently on {new.server.name} (SHOW CREATE USER differs)")
        there = {canonical(g.text) for g in lines_for(new.grants(user, host), shards, include_global=True)}
        missing = [g.text for g in lines if canonical(g.text) not in there]
        if missing:
            problems.append(f"{who} lacks on {new.server.name}: {'; '.join(missing)}")
        for g in lines:
            if g.level in ("table", "column") and g.schema in tables and g.obj not in tables[g.schema]:
                problems.append(f"{who} is granted {g.schema}.{g.obj}, which {new.server.name} lacks")
    for user, host in [a for a in accounts.users if a not in accounts.grants]:  # through a role only
        if not new.account_exists(user, host):
            problems.append(f"{user}@{host} does not exist on {new.server.name}")
        elif old.create_user_statement(user, host) != new.create_user_statement(user, host):
            problems.append(f"{user}@{host} authenticates differently on {new.server.name} (SHOW CREATE USER differs)")
    for role, lines in accounts.roles.items():
        if not new.role_exists(role):
            problems.append(f"role {role} does not exist on {new.server.name}")
            continue
        there = {canonical(g.text) for g in lines_for(new.role_grants(role), shards, include_global=True)}
        missing = [g.text for g in lines if canonical(g.text) not in there]
        if missing:
            problems.append(f"role {role} lacks on {new.server.name}: {'; '.join(missing)}")
    if accounts.members:
        held = set(new.role_members(set(accounts.roles)))
        for user, host, role in accounts.members:
            if (user, host, role) not in held:
                problems.append(f"{user}{'@' + host if host else ''} does not hold role {role} on {new.server.name}")
    for (user, host), role in accounts.default_roles.items():
        if role and new.account_exists(user, host) and new.default_role(user, host) != role:
            problems.append(f"{user}@{host} does not start with role {role} on {new.server.name}")
    return problems


def try_login(name: str, address: str, creds: Credentials, shards: list[str]) -> str:
    """Log in to `address` as an application account, read read_only, and reach one table of
    each shard the account can see. Returns what it found; raises when it cannot."""
    host, _, port = address.rpartition(":")
    with Server(name, host, int(port), creds, connect_timeout=3, read_timeout=10, retries=0) as srv:
        insp = Inspector(srv)
        reached = []
        for shard in shards:
            visible = insp.base_tables(shard)
            if visible:
                insp.reach_table(shard, visible[0])
                reached.append(f"{shard}.{visible[0]}")
        if insp.read_only():
            raise DbmigrateError(f"{creds.user} logs in to {address} but it is read-only")
    return f"{creds.user} logs in to {address} (writable) and reaches {', '.join(reached) or 'no table'}"


def merge(into: Accounts, more: Accounts) -> None:
    into.grants.update(more.grants)
    into.roles.update(more.roles)
    into.members += [m for m in more.members if m not in into.members]
    into.default_roles.update(more.default_roles)


def writers_that_bypass(accounts: Accounts, bypass_users: set[str], server: str) -> list[str]:
    """Accounts that write the moved shards and that read_only does not stop (SUPER, READ ONLY
    ADMIN, directly or through a role): after the fence they would keep writing on the old
    server while their shards open on the instance."""
    return [f"{user}@{host} writes the shards{how} and bypasses read_only on {server}: the fence would not stop it"
            for (user, host), how in [(a, "") for a in accounts.writers] + [(a, " through a role")
                                                                             for a in accounts.role_writers]
            if user in bypass_users]


def writers_on_instance(new: Inspector, accounts: Accounts, shards: list[str]) -> tuple[list[str], list[str]]:
    """After the switch: every account that writes these shards holds, on the instance, each of
    its write grant lines on them, and the instance takes writes. Returns (accounts that can,
    problems)."""
    if new.read_only():
        return [], [f"{new.server.name} is read-only: no application account can write there"]
    ok, problems = [], []
    for user, host in accounts.writers:
        lines = [g for g in accounts.grants[(user, host)] if g.writes and
                 (g.schema in shards or g.level == "schema" and any(like_matches(g.schema or "", s) for s in shards))]
        if not lines:
            continue
        who = f"{user}@{host}"
        if not new.account_exists(user, host):
            problems.append(f"{who} does not exist on {new.server.name}")
            continue
        there = {canonical(g.text) for g in lines_for(new.grants(user, host), shards, include_global=True)}
        missing = [g.text for g in lines if canonical(g.text) not in there]
        if missing:
            problems.append(f"{who} cannot write on {new.server.name}: lacks {'; '.join(missing)}")
        else:
            ok.append(who)
    return ok, problems
