"""Wire a fresh topology: accounts on every server and GTID replication from the
primary, as the inventory describes it (roles and credentials).

For servers that were started empty (containers of a docker compose file, new
hosts): the accounts of the inventory's credential references are created on
every server with sql_log_bin=0 (so no server gets GTIDs the others lack), the
replicas replicate from the primary, and every server but the primary is
read-only. Idempotent: what is already in place is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.db.flavor import MARIADB, Flavor
from dbmigrate.db.inspector import Inspector
from dbmigrate.clock import Clock, wait_until
from dbmigrate.exceptions import DbmigrateError, UsageError, WaitTimeout

if TYPE_CHECKING:
    from dbmigrate.config import Inventory


@dataclass(frozen=True)
class Account:
    credentials: Credentials
    grants: tuple[str, ...]  # "PRIVILEGES ON what", granted TO the account


def accounts_for(inv: Inventory, cluster: str, app_schemas: tuple[str, ...], flavor: Flavor = MARIADB) -> list[Account]:
    """The inventory's accounts with their grants, in the privilege names of `flavor`."""
    spec = inv.cluster(cluster)
    admin = inv.credentials_for(next(iter(spec.servers.values())))
    out = [Account(admin, ("ALL PRIVILEGES ON *.*",)),
           Account(inv.replication_credentials(cluster), (flavor.replication_grants(),))]
    app = inv.app_credentials(cluster)
    if app is not None:
        out.append(Account(app, tuple(f"ALL PRIVILEGES ON `{s}`.*" for s in app_schemas)))
    return out


def create_account(applier: Applier, account: Account) -> None:
    """CREATE USER and its grants; an account with every privilege may grant them on."""
    c = account.credentials
    applier.create_user(c.user, c.password or "")
    for grant in account.grants:
        applier.grant(grant, c.user, with_grant_option="*.*" in grant and grant.startswith("ALL"))


def ensure_accounts(server: Server, accounts: list[Account], app_schemas: tuple[str, ...]) -> list[str]:
    """Create missing accounts and schemas on one server, without binlogging them."""
    done = []
    applier, insp = Applier(server), Inspector(server)
    applier.binlog_session(False)
    try:
        for schema in app_schemas:
            applier.create_schema(schema)
        for acc in accounts:
            if insp.user_exists(acc.credentials.user):
                continue
            create_account(applier, acc)
            done.append(f"{acc.credentials.user}@{server.name}")
    finally:
        applier.binlog_session(True)
    return done


def wait_replicating(replica: Server, source_name: str, target: str, timeout_s: float,
                     clock: Clock | None = None, interval: float = 0.1) -> None:
    """Until `replica` runs replication and has applied `target`; its replication error
    ends the wait at once, and the error names the link."""
    insp = Inspector(replica)

    def caught_up() -> bool:
        st = insp.replica_status()
        if st and st.running and insp.has_applied(target):
            return True
        if st and st.last_error:
            raise DbmigrateError(f"replication {source_name} -> {replica.name} failed: {st.last_error}")
        return False

    try:
        wait_until(caught_up, timeout=timeout_s, interval=interval, clock=clock,
                   what=f"{replica.name} to replicate from {source_name}")
    except WaitTimeout:
        raise WaitTimeout(f"{replica.name} did not start replicating from {source_name} within {timeout_s:g}s") from None


def wire(inv: Inventory, cluster: str, root: Credentials, *, app_schemas: tuple[str, ...] = ("app", "sbtest"),
         timeout_s: float = 60, say: Callable[[str], None] = lambda m: None, clock: Clock | None = None) -> list[str]:
    spec = inv.cluster(cluster)
    primaries = [n for n, s in spec.servers.items() if s.role == "primary"]
    if len(primaries) != 1:
        raise UsageError(f"cluster '{cluster}' needs exactly one server with role: primary to be wired "
                         f"(found {len(primaries)})", hint="mark the primary in the inventory")
    primary = primaries[0]

    def as_root(name: str) -> Server:
        s = spec.servers[name]
        return Server(name, s.host, s.port, root, connect_timeout=inv.defaults.connect_timeout, unix_socket=s.socket)

    said = []
    repl = inv.replication_credentials(cluster)
    with as_root(primary) as p:
        accounts = accounts_for(inv, cluster, app_schemas, p.flavor)
        created = ensure_accounts(p, accounts, app_schemas)
        Applier(p).set_read_only(False)
        target = Inspector(p).gtid_binlog_pos()
    said += created
    for name, s in spec.servers.items():
        if name == primary:
            continue
        with as_root(name) as r:
            said += ensure_accounts(r, accounts, app_schemas)
            insp, app = Inspector(r), Applier(r)
            app.set_read_only(True)
            st = insp.replica_status()
            host, port = inv.replication_address(primary)
            if st is not None and st.source_host == host and st.source_port == port and st.running:
                continue
            app.stop_replica()
            app.change_source(host, port, repl)
            app.start_replica()
            said.append(f"{name} replicates from {primary}")
            wait_replicating(r, primary, target, timeout_s, clock)
    for line in said:
        say(line)
    return said
