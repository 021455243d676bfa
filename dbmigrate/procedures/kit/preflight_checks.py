"""Preflight gates: may this candidate replace this primary right now?

Each gate returns a `GateResult(ok, reason, details)` (it unpacks as that
3-tuple) with the gate's name attached. The rules are pure functions of facts
already read (`*_rule`), so they are unit-tested without servers; thin
wrappers read the facts through the inspector. `run_preflight` runs them all
for an inventory cluster and never stops at the first failure: the operator
sees every reason at once.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator

from dbmigrate.db.connection import Server
from dbmigrate.db.flavor import Flavor, detect
from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import DbmigrateError, UsageError
from dbmigrate.hosts import Host, NoAccessHost, host_for
from dbmigrate.lag import sample_lag
from dbmigrate.routing import router_for
from dbmigrate.topology.discovery import Cluster, Node, normalize_address
from dbmigrate.topology.find import discover_inventory
from dbmigrate.topology.probe import ServerFacts

if TYPE_CHECKING:
    from dbmigrate.config import Inventory, ServerSpec
    from dbmigrate.routing.base import Router

MIB = 1024 * 1024


@dataclass
class GateResult:
    ok: bool
    reason: str
    details: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    def __iter__(self) -> Iterator[Any]:
        return iter((self.ok, self.reason, self.details))

    def named(self, name: str) -> "GateResult":
        self.name = name
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Limits:
    max_lag_ms: float = 1000.0
    max_trx_age_s: float = 30.0
    min_free_mb: int = 1024
    # Off in dry-runs: the heartbeat is a write (and creates its table on first use);
    # lag then comes from an existing heartbeat or from GTID distance.
    write_heartbeat: bool = True
    allow_read_only_bypass: tuple[str, ...] = ()  # accounts whose sessions are ended before the open
    fence_expiry: str = "require"  # require | if_available | off (see FenceParams)


# ---- grant parsing (pure) -----------------------------------------------------

_GRANT = re.compile(r"^\s*GRANT\s+(?P<privs>.+?)\s+ON\s+(?P<on>\S+)\s+TO\s+", re.IGNORECASE | re.DOTALL)


def parse_grant(line: str) -> tuple[set[str], str] | None:
    """'GRANT SELECT, SUPER ON *.* TO ...' -> ({'SELECT', 'SUPER'}, '*.*'); None for role grants.

    Only privilege names and the object are kept: a grant line can carry a
    password hash, which must not reach reports.
    """
    m = _GRANT.match(line)
    if not m:
        return None
    privs = re.sub(r"\([^)]*\)", "", m.group("privs"))  # column lists: SELECT (a, b)
    names = {" ".join(p.split()).upper() for p in privs.split(",") if p.strip()}
    return names, m.group("on").replace("`", "")


def global_privileges(grant_lines: list[str]) -> set[str]:
    out: set[str] = set()
    for line in grant_lines:
        parsed = parse_grant(line)
        if parsed and parsed[1] == "*.*":
            out |= parsed[0]
    return out


# ---- rules (pure) ---------------------------------------------------------------

def replication_running_rule(nodes: list[Node]) -> GateResult:
    stopped = {n.address: f"io={n.facts.io_running} sql={n.facts.sql_running}"
               + (f" ({n.facts.last_error})" if n.facts.last_error else "")
               for n in nodes if not n.reachable or not n.replicating}
    details = {"checked": [n.address for n in nodes], "stopped": stopped}
    if stopped:
        return GateResult(False, "replication not running on " + "; ".join(f"{a}: {s}" for a, s in stopped.items()),
                          details)
    return GateResult(True, f"IO and SQL threads running on {len(nodes)} replica(s)", details)


def errant_rule(flavor: Flavor, candidate_state: str, primary_state: str, candidate: str) -> GateResult:
    errant = flavor.errant(candidate_state, primary_state)
    details = {"errant": errant, "candidate_state": candidate_state, "primary_state": primary_state}
    if errant:
        return GateResult(False, f"errant GTIDs on {candidate}: {', '.join(errant)} (written there, never on the "
                                 f"primary)", details)
    return GateResult(True, f"no errant GTIDs on {candidate}", details)


# What needs every change logged as rows: the post-fence audit names the rows the old primary
# wrote after the fence. A promote itself does not: GTID positions carry it in any format.
NEEDS_ROW = ("the post-fence audit's rows (what the old primary wrote after the fence, by table)",)


def without_row(binlog_format: str | None) -> str:
    """The features a non-ROW binlog turns off, in words ('' for ROW)."""
    if (binlog_format or "").upper() == "ROW":
        return ""
    return (f"binlog_format {binlog_format or '?'}: not available: " + "; ".join(NEEDS_ROW)
            + " (they need ROW); the GTID checks still decide")


def binlog_rule(f: ServerFacts) -> GateResult:
    bad = []
    fmt = (f.binlog_format or "").upper()
    if not f.log_bin:
        bad.append("log_bin is OFF")
    if fmt not in ("ROW", "MIXED"):
        bad.append(f"binlog_format is {f.binlog_format or '?'}, not ROW or MIXED")
    if not f.log_slave_updates:
        bad.append("log_slave_updates is OFF (its replicas would miss what it replicated)")
    details = {"log_bin": f.log_bin, "binlog_format": f.binlog_format, "log_slave_updates": f.log_slave_updates,
               **({"not_available": list(NEEDS_ROW)} if fmt == "MIXED" else {})}
    if bad:
        return GateResult(False, f"{f.address}: " + "; ".join(bad), details)
    if fmt == "MIXED":
        return GateResult(True, f"{f.address}: log_bin ON, log_slave_updates ON; {without_row(f.binlog_format)}",
                          details)
    return GateResult(True, f"{f.address}: log_bin ON, ROW, log_slave_updates ON", details)


def _major_minor(version: str) -> tuple[int, int] | None:
    m = re.match(r"^(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def versions_rule(candidate_version: str, primary_version: str) -> GateResult:
    cf, pf = detect(candidate_version).name, detect(primary_version).name
    cv, pv = _major_minor(candidate_version), _major_minor(primary_version)
    details = {"candidate": candidate_version, "primary": primary_version}
    if cf != pf:
        return GateResult(False, f"flavors differ: candidate is {cf}, primary is {pf}", details)
    if cv is None or pv is None:
        return GateResult(False, f"cannot read versions '{candidate_version}' / '{primary_version}'", details)
    if cv < pv:
        return GateResult(False, f"candidate {cv[0]}.{cv[1]} is older than primary {pv[0]}.{pv[1]}: the old primary "
                                 f"could not replicate back from it safely", details)
    return GateResult(True, f"{cf} {cv[0]}.{cv[1]} >= {pv[0]}.{pv[1]}", details)


def filters_rule(nodes: list[Node]) -> GateResult:
    found = {n.address: n.filters for n in nodes if n.filters}
    if found:
        return GateResult(False, "replication filters on " + "; ".join(
            f"{a}: " + ", ".join(f"{k}={v}" for k, v in fl.items()) for a, fl in found.items()), {"filters": found})
    return GateResult(True, f"no replication filters on {len(nodes)} replica(s)", {"filters": {}})


def read_only_rule(primary: Node, replicas: list[Node]) -> GateResult:
    wrong = {}
    if primary.facts.read_only is not False:
        wrong[primary.address] = f"primary read_only={primary.facts.read_only}, expected OFF"
    for n in replicas:
        if n.facts.read_only is not True:
            wrong[n.address] = f"replica read_only={n.facts.read_only}, expected ON"
    details = {"read_only": {n.address: n.facts.read_only for n in [primary, *replicas]}, "wrong": wrong}
    if wrong:
        return GateResult(False, "; ".join(f"{a}: {w}" for a, w in wrong.items()), details)
    return GateResult(True, f"primary writable, {len(replicas)} replica(s) read_only", details)


def long_trx_rule(age_s: float, trx: dict[str, Any] | None, max_age_s: float) -> GateResult:
    details = {"oldest_age_s": round(age_s, 1), "max_age_s": max_age_s,
               "transaction": {k: str(v) for k, v in (trx or {}).items()}}
    if trx is not None and age_s > max_age_s:
        return GateResult(False, f"transaction {trx.get('trx_id')} (connection {trx.get('thread_id')}) open for "
                                 f"{age_s:.0f}s > {max_age_s:g}s: a fence would wait on it or kill it", details)
    if trx is None:
        return GateResult(True, "no open transaction on the primary", details)
    return GateResult(True, f"oldest transaction {age_s:.1f}s <= {max_age_s:g}s", details)


REPLICATION_PRIVS = {"REPLICATION SLAVE", "REPLICATION REPLICA", "ALL PRIVILEGES", "ALL"}


def reverse_path_rule(user: str, grants_by_host: dict[str, list[str]], candidate: str) -> GateResult:
    privs = {h: sorted(global_privileges(g)) for h, g in grants_by_host.items()}
    details = {"user": user, "hosts": sorted(grants_by_host), "global_privileges": privs}
    if not grants_by_host:
        return GateResult(False, f"replication user '{user}' does not exist on {candidate}: the old primary could "
                                 f"not replicate from it (no way back)", details)
    able = [h for h, p in privs.items() if REPLICATION_PRIVS & set(p)]
    if not able:
        return GateResult(False, f"'{user}' on {candidate} lacks REPLICATION SLAVE on *.*", details)
    return GateResult(True, f"'{user}'@{','.join(able)} can replicate from {candidate}", details)


def app_fence_rule(user: str, grants_by_host: dict[str, list[str]], bypass: set[str], server: str) -> GateResult:
    privs = {h: sorted(global_privileges(g)) for h, g in grants_by_host.items()}
    details = {"user": user, "bypass_privileges": sorted(bypass), "global_privileges": privs}
    if not grants_by_host:
        return GateResult(False, f"application user '{user}' not found on {server}: cannot tell whether read_only "
                                 f"would fence it", details)
    holders = {h: sorted(bypass & set(p)) for h, p in privs.items() if bypass & set(p)}
    if holders:
        return GateResult(False, f"application user '{user}' bypasses read_only on {server}: " + "; ".join(
            f"@{h} has {', '.join(p)}" for h, p in holders.items()), details)
    return GateResult(True, f"read_only fences '{user}' on {server} (none of {', '.join(sorted(bypass))})", details)


# The server's own locked accounts: they own system objects and take no sessions.
SERVER_ACCOUNTS = frozenset({"mariadb.sys", "mysql.sys", "mysql.session", "mysql.infoschema", "PUBLIC",
                             "system user", "event_scheduler"})


def writers_fence_rule(writers: dict[tuple[str, str], set[str]], bypass: set[str], session_users: list[str],
                       allowed: set[str], exempt: set[str], server: str) -> GateResult:
    """Every account that can write the application's schemas (`writers`: (user, host) -> the
    levels it writes at), other than the tool's own (`exempt`), must be stopped by read_only
    once the fence is up, or have its sessions ended at the fence (allowed by name).

    An account that bypasses read_only and writes at schema, table or column level (or through
    a role) is an application's: its pool reconnects at any moment and would write past the
    fence, so it fails whether or not it has a session now. One that writes only through
    global privileges (an administrator's) fails when it has a session now."""
    levels: dict[str, set[str]] = {}
    for (user, _host), lv in writers.items():
        if user not in exempt:
            levels.setdefault(user, set()).update(lv)
    sessions = {u: session_users.count(u) for u in levels if u in session_users}
    checked = sorted(levels)
    details = {"checked": {u: sorted(levels[u]) for u in checked},
               "excluded": sorted({u for u, _ in writers if u in exempt}),
               "bypassing": sorted(u for u in checked if u in bypass), "sessions": sessions,
               "allowed": sorted(allowed)}
    problems, notes = [], []
    for user in checked:
        if user not in bypass:
            continue
        what = ", ".join(sorted(levels[user]))
        if user in allowed:
            notes.append(f"'{user}' ({what}) bypasses read_only: allowed, its sessions are ended at the fence")
        elif levels[user] - {"global"}:
            problems.append(f"'{user}' writes the application's schemas ({what}) and bypasses read_only on {server}: "
                            f"its connections would keep writing after the fence (revoke SUPER / READ ONLY ADMIN, "
                            f"or allow_read_only_bypass: [{user}] to end its sessions at the fence)")
        elif user in sessions:
            problems.append(f"'{user}' (global write privileges) bypasses read_only and has {sessions[user]} "
                            f"session(s) on {server}: they could write after the fence (end them, or "
                            f"allow_read_only_bypass: [{user}])")
        else:
            notes.append(f"warning: '{user}' (global write privileges) bypasses read_only on {server}, no session now")
    if problems:
        return GateResult(False, "; ".join(problems), details)
    listing = ", ".join(f"{u} ({', '.join(sorted(levels[u]))})" for u in checked) or "none"
    excluded = f"; not checked: {', '.join(details['excluded'])} (the tool's own)" if details["excluded"] else ""
    return GateResult(True, f"read_only fences every account that writes the application's schemas on {server}: "
                            f"{listing}{excluded}" + "".join(f"; {n}" for n in notes), details)


def fence_expiry_rule(policy: str, scheduler_on: dict[str, bool]) -> GateResult:
    """The fence expires by itself only where the event scheduler runs (the old primary, and the
    candidate, which a switch back fences)."""
    if policy == "off":
        return GateResult(True, "fence expiry off (fence_expiry: off): a tool frozen inside the window holds the "
                                "cluster read-only until it resumes", {"policy": policy})
    off = sorted(name for name, on in scheduler_on.items() if not on)
    if not off:
        return GateResult(True, f"the fence expires by itself on {', '.join(sorted(scheduler_on))} "
                                f"(event_scheduler=ON)", {"policy": policy})
    if policy == "if_available":
        return GateResult(True, f"warning: event_scheduler=OFF on {', '.join(off)}: fences there do not expire by "
                                f"themselves (fence_expiry: if_available)", {"policy": policy, "off": off})
    return GateResult(False, f"event_scheduler=OFF on {', '.join(off)}: the fence could not expire by itself, and a "
                             f"tool frozen inside the window would hold the cluster read-only; turn the event "
                             f"scheduler on (also in the config), or set fence_expiry: if_available",
                      {"policy": policy, "off": off})


def disk_rule(path: str, free_bytes: int, need_bytes: int) -> GateResult:
    details = {"path": path, "free_mb": free_bytes // MIB, "need_mb": need_bytes // MIB}
    if free_bytes < need_bytes:
        return GateResult(False, f"{path}: {free_bytes // MIB} MiB free < {need_bytes // MIB} MiB needed", details)
    return GateResult(True, f"{path}: {free_bytes // MIB} MiB free >= {need_bytes // MIB} MiB needed", details)


# ---- gates that read servers ----------------------------------------------------------

def _grants_by_host(server: Server, user: str) -> dict[str, list[str]]:
    insp = Inspector(server)
    return {h: insp.grants(user, h) for h in insp.user_hosts(user)}


def fresh_states(candidate: Server, primary: Server) -> tuple[str, str]:
    """Candidate's binlog state, then the primary's: read in this order, the primary is
    never behind the snapshot of its replica, so live writes cannot look errant."""
    cand_state = Inspector(candidate).gtid_state()
    return cand_state, Inspector(primary).gtid_state()


def lag_gate(primary: Server, replicas: list[Server], max_lag_ms: float, write: bool = True) -> GateResult:
    samples = sample_lag(primary, replicas, limit_ms=max_lag_ms, write=write)
    details = {"max_lag_ms": max_lag_ms, "replicas": [s.to_dict() for s in samples]}
    bad = [s for s in samples if not s.ok]
    if bad:
        return GateResult(False, "; ".join(f"{s.name}: {s.reason}" for s in bad), details)
    worst = max((s.lag_ms or 0.0 for s in samples), default=0.0)
    return GateResult(True, f"{len(samples)} replica(s) within {max_lag_ms:g} ms (worst {worst:.0f} ms)", details)


def long_trx_gate(primary: Server, max_age_s: float) -> GateResult:
    age, trx = Inspector(primary).oldest_transaction_age()
    return long_trx_rule(age, trx, max_age_s)


def reverse_path_gate(candidate: Server, repl_user: str) -> GateResult:
    return reverse_path_rule(repl_user, _grants_by_host(candidate, repl_user), candidate.address)


def app_fence_gate(servers: list[tuple[str, Any]], app_user: str, repl_user: str,
                   allowed: tuple[str, ...] = ()) -> GateResult:
    """The inventory's app account, and every other account that can write the application's
    schemas, stopped by read_only on each of `servers` ((address, inspector) pairs: the
    primary the fence closes, then the candidate a way back fences). Sessions count on the
    first only: the one fenced now."""
    results = []
    for i, (address, insp) in enumerate(servers):
        app = app_fence_rule(app_user, {h: insp.grants(app_user, h) for h in insp.user_hosts(app_user)},
                             insp.flavor.read_only_privileges(), address)
        exempt = {insp.login_user, repl_user, *SERVER_ACCOUNTS}
        writers = writers_fence_rule(insp.schema_writers(insp.schemas()), insp.read_only_bypass_users(),
                                     [x.user for x in insp.sessions()] if i == 0 else [], set(allowed), exempt,
                                     address)
        ok = app.ok and writers.ok
        reason = "; ".join(r.reason for r in (app, writers) if not r.ok) if not ok else writers.reason
        results.append(GateResult(ok, reason, {"app_user": app.details, **writers.details}))
    bad = [r for r in results if not r.ok]
    details = {"servers": {a: r.details for (a, _), r in zip(servers, results)}}
    if bad:
        return GateResult(False, "; ".join(r.reason for r in bad), details)
    return GateResult(True, "; ".join(r.reason for r in results), details)


def disk_gate(host: Host, datadir: str | None, need_bytes: int) -> GateResult:
    """Free space of the candidate's datadir, measured on its host (locally or over ssh)."""
    if not datadir:
        return GateResult(True, "skipped: no datadir for the candidate in the inventory", {})
    if isinstance(host, NoAccessHost):
        # A managed service's disk is not ours to see; an undeclared host is reported, not guessed.
        why = "declared access: none" if host.declared else "no access declared for its host (add access: to check it)"
        return GateResult(True, f"not checked: {datadir} on {host.name}: {why}", {"path": datadir, "host": host.name})
    result = disk_rule(datadir, host.free_bytes(datadir, timeout=30), need_bytes)
    result.details["host"] = host.name
    return result


# ---- the whole preflight ------------------------------------------------------------

def bypass_sessions_rule(session_users: list[str], bypass: set[str], exempt: set[str], allowed: set[str],
                         server: str) -> GateResult:
    """Sessions of accounts that bypass read_only would keep writing on the fenced primary."""
    holders = sorted({u for u in session_users if u in bypass and u not in exempt})
    refused = [u for u in holders if u not in allowed]
    details = {"holders": holders, "allowed": sorted(allowed)}
    if refused:
        return GateResult(False, f"account(s) {', '.join(refused)} bypass read_only and have sessions on {server}: "
                                 f"they could write after the fence; end them or allow by name "
                                 f"(allow_read_only_bypass: [{', '.join(refused)}]) to end them before the open",
                          details)
    if holders:
        return GateResult(True, f"allowed account(s) {', '.join(holders)} bypass read_only on {server}: "
                                f"their sessions are ended before the candidate opens", details)
    return GateResult(True, f"no account that bypasses read_only has a session on {server}", details)


def bypass_sessions_gate(primary: Server, repl_user: str, allowed: tuple[str, ...]) -> GateResult:
    insp = Inspector(primary)
    exempt = {insp.login_user, repl_user, "system user", "event_scheduler"}
    return bypass_sessions_rule([s.user for s in insp.sessions()], insp.read_only_bypass_users(), exempt,
                                set(allowed), primary.name)


# ---- the path, not the config: every server, the router and the replication login answer ----

ANSWER_TIMEOUT_S = 5.0  # a hung server must not hold preflight for the default read timeout


def answers_rule(what: str, failures: dict[str, str], checked: list[str]) -> GateResult:
    """One line naming every `what` that failed and why; ok when nothing failed."""
    if failures:
        return GateResult(False, "; ".join(f"{n}: {why}" for n, why in failures.items()), {"failed": failures})
    return GateResult(True, f"{what}: {', '.join(checked)}", {"checked": checked})


def _bounded(server: Server, timeout_s: float = ANSWER_TIMEOUT_S) -> Server:
    """The same server with short connect/read bounds and no retries: a probe, not a workload."""
    return replace(server, connect_timeout=min(server.connect_timeout, timeout_s),
                   read_timeout=int(min(server.read_timeout, timeout_s)), retries=0)


def _answers(server: Server) -> str | None:
    """None when the server answers a query within the bound; else why not."""
    probe = _bounded(server)
    try:
        Inspector(probe).server_id()
        return None
    except DbmigrateError as e:
        return e.message
    finally:
        probe.close()


def servers_answer_gate(inventory: Inventory, cluster: str) -> GateResult:
    """Every server of the inventory answers: a replica that is down would fail the repoint after the flip."""
    names = list(inventory.cluster(cluster).servers)
    failures = {}
    for name in names:
        why = _answers(inventory.open(name))
        if why:
            failures[name] = f"does not answer ({why})"
    return answers_rule("every server answers", failures, names)


def replication_login_gate(inventory: Inventory, cluster: str, sources: list[str]) -> GateResult:
    """Log in with the replication credentials at the address replicas use, on each source they
    will use (the old primary now, the candidate after the flip): proves the password, not a grant."""
    creds = inventory.replication_credentials(cluster)
    failures, checked = {}, []
    for source in sources:
        name = inventory.server_name(inventory.find_server(source)[1])
        host, port = inventory.replication_address(name)
        why = _answers(Server(f"{name} as {creds.user}", host, port, creds))
        checked.append(f"{creds.user}@{host}:{port}")
        if why:
            failures[name] = f"replication login {creds.user}@{host}:{port} failed ({why})"
    return answers_rule("replication login works", failures, checked)


def router_gate(router: Router, candidate: Server, primary: Server) -> GateResult:
    """The router answers and can move the writer from the primary to the candidate: a missing
    admin socket or an unknown writer backend is found now, not at the flip."""
    try:
        plan = router.describe_switch(candidate, primary)
    except DbmigrateError as e:
        return GateResult(False, f"{router.describe()}: {e.message}", {})
    return GateResult(True, f"{router.describe()} knows {candidate.name} in its writer backend", {"plan": plan})


def _guard(name: str, fn: Callable[[], GateResult]) -> GateResult:
    try:
        return fn().named(name)
    except DbmigrateError as e:
        return GateResult(False, f"could not check: {e.message}", {"error": e.message}, name)


def resolve_candidate(inventory: Inventory, cluster: str, candidate: str) -> tuple[str, ServerSpec]:
    """(address, ServerSpec) of the candidate; UsageError when it is not a server of that cluster."""
    cname, spec = inventory.find_server(candidate)
    if cname != cluster:
        raise UsageError(f"candidate '{candidate}' belongs to cluster '{cname}', not '{cluster}'",
                         hint=f"servers of {cluster}: {', '.join(inventory.cluster(cluster).servers)}")
    return normalize_address(spec.host, spec.port), spec


def run_preflight(inventory: Inventory, cluster: str, candidate: str, limits: Limits = Limits()) -> list[GateResult]:
    """Every preflight gate for promoting `candidate` (inventory name or host:port) in `cluster`."""
    cand_addr, cand_spec = resolve_candidate(inventory, cluster, candidate)
    with discover_inventory(inventory, cluster, use_orchestrator=False) as cl:
        return _preflight(inventory, cluster, cl, cand_addr, cand_spec, limits)


def _preflight(inventory: Inventory, cluster: str, cl: Cluster, cand_addr: str, cand_spec: ServerSpec, limits: Limits) -> list[GateResult]:
    primary = cl.primary
    if primary is None:
        return [GateResult(False, "no single primary: " + ("; ".join(cl.problems) or "none found"),
                           {"problems": cl.problems}, "topology")]
    if cand_addr == primary.address:
        raise UsageError(f"candidate {cand_addr} is the current primary", hint="name one of its replicas")
    cand = cl.nodes.get(cand_addr)
    if cand is None or not cand.reachable:
        why = cand.facts.error if cand is not None else "not found by discovery"
        return [GateResult(False, f"candidate {cand_addr} is unreachable: {why}", {}, "topology")]
    replicas = cl.replicas
    if cand not in replicas:
        return [GateResult(False, f"candidate {cand_addr} is not a replica in this cluster (role {cand.role})",
                           {"role": cand.role}, "topology")]
    others = [n for n in replicas if n is not cand]
    results = [GateResult(True, f"primary {primary.address}, candidate {cand.address}, {len(others)} other replica(s)",
                          {"primary": primary.address, "candidate": cand.address,
                           "replicas": [n.address for n in others]}, "topology")]
    reachable = [n for n in replicas if n.reachable]
    listed = {normalize_address(s.host, s.port): n for n, s in inventory.cluster(cluster).servers.items()}
    if primary.address not in listed:
        # Found by following the replicas: the inventory names another address for it.
        results.append(GateResult(
            False, f"the replicas replicate from {primary.address}, which cluster {cluster} in the inventory does "
                   f"not list (it lists {', '.join(f'{n} at {a}' for a, n in listed.items())}): is a host or port "
                   f"wrong there?", {"primary": primary.address, "listed": listed}, "inventory_matches"))

    def repl_user() -> str:
        return inventory.replication_credentials(cluster).user

    def app_user() -> str:
        creds = inventory.app_credentials(cluster)
        if creds is None:
            raise UsageError("the inventory names no app_credentials for this cluster: add them so the fence "
                             "can be verified")
        return creds.user

    def need_bytes() -> int:
        missing = max(0, Inspector(primary.live).data_size_bytes() - Inspector(cand.live).data_size_bytes())
        return limits.min_free_mb * MIB + missing

    def router() -> GateResult:
        return router_gate(router_for(inventory, cluster), cand.live, primary.live)

    gates: list[tuple[str, Callable[[], GateResult]]] = [
        ("replication_running", lambda: replication_running_rule([cand, *others])),
        ("lag", lambda: lag_gate(primary.live, [n.live for n in reachable], limits.max_lag_ms,
                                       limits.write_heartbeat)),
        ("errant_gtids", lambda: errant_rule(cand.live.flavor, *fresh_states(cand.live, primary.live), cand.address)),
        ("candidate_binlog", lambda: binlog_rule(cand.facts)),
        ("versions", lambda: versions_rule(cand.facts.version, primary.facts.version)),
        ("replication_filters", lambda: filters_rule([cand, *others])),
        ("read_only", lambda: read_only_rule(primary, replicas)),
        ("long_transactions", lambda: long_trx_gate(primary.live, limits.max_trx_age_s)),
        ("reverse_path", lambda: reverse_path_gate(cand.live, repl_user())),
        ("read_only_bypass", lambda: bypass_sessions_gate(primary.live, repl_user(),
                                                           limits.allow_read_only_bypass)),
        ("app_user_fenced", lambda: app_fence_gate(
            [(n.address, Inspector(n.live)) for n in (primary, cand)], app_user(), repl_user(),
            limits.allow_read_only_bypass)),
        ("fence_expiry", lambda: fence_expiry_rule(limits.fence_expiry, {
            primary.address: Inspector(primary.live).event_scheduler_on(),
            cand.address: Inspector(cand.live).event_scheduler_on()})),
        ("disk", lambda: disk_gate(host_for(inventory, inventory.server_name(cand_spec)), cand_spec.datadir,
                                   need_bytes())),
        # The path, not the config: what a run will use, tried now.
        ("servers_answer", lambda: servers_answer_gate(inventory, cluster)),
        ("router", router),
        ("replication_login", lambda: replication_login_gate(
            inventory, cluster, [a for a in (primary.address, cand_addr) if a in listed])),
    ]
    results += [_guard(name, fn) for name, fn in gates]
    return results
