"""Procedure `consolidate`: move logical shards (schemas) from old servers onto the
instances of a capacity plan (`dbmigrate consolidate plan --out PLAN.json`).

Phases:
  preflight  sources reachable with ROW binlogs, shards present, routes point at the sources
  provision  one step per planned instance: it must answer (a sandbox rehearsal creates it)
  seed       one step per (instance, old server): logical copy of that server's shards
             (mariadb-dump --single-transaction --master-data, credentials in a private file),
             then a named replication connection from the dump's binlog coordinates, filtered
             to those shards (multi-source when an instance takes shards from several servers)
  cutover    gate: every connection running and caught up; then one step per old server:
             fence it (read_only, app sessions ended) -> each instance applies its final
             position (bounded) -> CHECKSUM TABLE equal on both sides -> the old server starts
             replicating those shards back -> open the instance -> the DSN file routes each
             shard to its instance -> drop the forward connection
  verify     every shard routes to its instance, which is writable

Replication uses binlog file/position per connection, not GTID: old servers usually
share GTID domain 0, and two sources in one domain cannot be ordered by GTID on the
instance that merges them. Such an instance runs with gtid_strict_mode=0 (the plan's
config says so); the preflight reports the domains it saw. Giving each old server its
own gtid_domain_id beforehand is the cleaner production setup.

Undo (rollback at any point, or `dbmigrate rollback RUN` after success) routes each
shard back to its old server after that server has applied, through the reverse
connection, every write the instance took: the old servers were only fenced, never
changed, so nothing acknowledged is lost.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import private_defaults_file
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.step import AutoGate, FunctionStep, Phase, Procedure, RunContext
from dbmigrate.exceptions import DbmigrateError, SafetyError, UsageError
from dbmigrate.procedures.consolidate.plan import ConsolidationPlan, PlannedInstance, connection_name
from dbmigrate.procedures.consolidate.provision import provisioner_for, sandbox_extra
from dbmigrate.procedures.consolidate.resources import (
    ConsolidateResources,
    ConsolidateState,
    CutRecord,
    load_plan,
    plan_path,
    prepare,
)
from dbmigrate.procedures.kit.drain import drain, protected_users
from dbmigrate.procedures.kit.resources import required, typed
from dbmigrate.procedures.registry import register
from dbmigrate.routing.dsn_file import DsnFileRouter

__all__ = ["ConsolidateError", "ConsolidateParams", "build", "dump_command", "dump_coordinates",
           "grants_for_shards", "import_command", "sandbox_extra"]


PLAN_ONLY = "plan"  # resources key of the plan when `dbmigrate plan` builds without servers


class ConsolidateError(DbmigrateError):
    """A consolidation step could not do its work (the message says which and why)."""


class ConsolidateParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    plan: str = Field(description="plan file written by `dbmigrate consolidate plan --out` (relative to the playbook)")
    strategy: Literal["instance-per-group", "merge"] = "instance-per-group"
    routes: Optional[str] = Field(None, description="DSN file with one entry per shard; default: the cluster's "
                                                    "dsn-file router")
    max_lag_s: float = Field(5, ge=0, description="catch-up gate: seconds behind on every connection")
    gate_timeout_s: float = Field(30, ge=0, description="how long the catch-up gate waits for that")
    catchup_timeout_s: float = Field(10, gt=0, le=600, description="fenced wait for an instance to apply an "
                                                                   "old server's final position")
    checksum: bool = Field(True, description="CHECKSUM TABLE old vs new inside the fenced window")
    drain_timeout_s: float = Field(1, ge=0, le=60)
    seed_timeout_s: float = Field(3600, gt=0)


# -- helpers -------------------------------------------------------------------------

def _res(ctx: RunContext) -> ConsolidateResources:
    return required(ctx, ConsolidateResources)


def _plan(ctx: RunContext) -> ConsolidationPlan:
    r = typed(ctx, ConsolidateResources)
    return r.plan if r is not None else ctx.resources[PLAN_ONLY]


def _state(ctx: RunContext) -> ConsolidateState:
    return ConsolidateState.load(ctx.state)


def _is_cut(ctx: RunContext, source: str) -> bool:
    return source in _state(ctx).cut


def _srv(ctx: RunContext, name: str) -> Server:
    return _res(ctx).servers[name]


def _applier(ctx: RunContext, name: str) -> Applier:
    srv = _srv(ctx, name)
    return Applier(srv, dry_run=ctx.dry_run, on_planned=lambda s, sql: ctx.record_statement(s, sql))


def _route(ctx: RunContext, shard: str) -> DsnFileRouter:
    return DsnFileRouter(shard, _res(ctx).routes)


def _addr(ctx: RunContext, name: str) -> str:
    return _res(ctx).servers.address(name)


def shards_of(plan: ConsolidationPlan, instance: str, source: str) -> list[str]:
    inst = plan.instance(instance)
    return [s for s in inst.shards if inst.shard_sources[s] == source]


def targets_of(plan: ConsolidationPlan, source: str) -> list[PlannedInstance]:
    return [i for i in plan.instances if source in i.sources]


def wild_patterns(shards: list[str]) -> list[str]:
    return [f"{s}.%" for s in shards]


# -- preflight -------------------------------------------------------------------------

def evaluate_preflight(ctx: RunContext, params: ConsolidateParams) -> tuple[bool, str, dict]:
    plan = _plan(ctx)
    problems: list[str] = []
    details: dict[str, Any] = {"strategy": plan.strategy, "domains": {}}
    if plan.strategy != params.strategy:
        problems.append(f"the plan was made for strategy {plan.strategy}, the playbook asks for {params.strategy}")
    for src in sorted({s.source for s in plan.shards}):
        try:
            insp = Inspector(_srv(ctx, src))
            v = insp.variables("log_bin", "binlog_format", "gtid_domain_id")
            if str(v["log_bin"]) not in ("1", "ON"):
                problems.append(f"{src}: log_bin is off (a source needs its binary log)")
            if str(v["binlog_format"]).upper() != "ROW":
                problems.append(f"{src}: binlog_format={v['binlog_format']} (ROW is needed: filters act on row events)")
            details["domains"][src] = sorted({int(g.split("-")[0]) for g in insp.gtid_binlog_pos().split(",") if g}
                                             | {int(v["gtid_domain_id"] or 0)})
            mine = [s.name for s in plan.shards if s.source == src]
            missing = [s for s in mine if s not in insp.schemas()]
            if missing:
                problems.append(f"{src}: shard(s) {', '.join(missing)} do not exist")
            for shard in mine:
                writer = _route(ctx, shard).current().writer
                if writer not in (None, _addr(ctx, src)) and not _is_cut(ctx, src):
                    problems.append(f"route of {shard} names {writer}, not its old server {src} ({_addr(ctx, src)})")
        except DbmigrateError as e:
            problems.append(f"{src}: {e.message}")
    seen: dict[int, list[str]] = {}
    for src, domains in details["domains"].items():
        for d in domains:
            seen.setdefault(d, []).append(src)
    shared = {d: s for d, s in seen.items() if len(s) > 1}
    details["shared_domains"] = {str(d): s for d, s in shared.items()}
    if problems:
        return False, "; ".join(problems), details
    note = (f"; GTID domain(s) {', '.join(map(str, sorted(shared)))} shared by several old servers: "
            "replication by file/position, merged instances run gtid_strict_mode=0") if shared else ""
    return True, f"{len(details['domains'])} old server(s) ready, {len(plan.shards)} shard(s) present{note}", details


def evaluate_caught_up(ctx: RunContext, params: ConsolidateParams) -> tuple[bool, str, dict]:
    """Every seeded connection runs and is within max_lag_s of its old server, waiting
    up to gate_timeout_s (a connection just started is still 'Connecting' for a moment)."""
    deadline = ctx.clock.monotonic() + params.gate_timeout_s
    while True:
        ok, reason, details = _caught_up_once(ctx, params)
        if ok or ctx.clock.monotonic() >= deadline:
            return ok, reason if ok else f"{reason} (after {params.gate_timeout_s:g}s)", details
        ctx.clock.sleep(0.2)


def _caught_up_once(ctx: RunContext, params: ConsolidateParams) -> tuple[bool, str, dict]:
    plan = _plan(ctx)
    details: dict[str, Any] = {}
    problems = []
    if ctx.dry_run:
        return True, "dry-run: not evaluated (the instances are not seeded)", details
    for inst in plan.instances:
        for src in inst.sources:
            if _is_cut(ctx, src):
                continue  # already cut over: the forward connection is gone on purpose
            conn = connection_name(src)
            try:
                st = Inspector(_srv(ctx, inst.name)).named_replica_status(conn)
            except DbmigrateError as e:
                problems.append(f"{inst.name}: {e.message}")
                continue
            if st is None:
                problems.append(f"{inst.name} has no connection '{conn}' from {src}")
                continue
            io, sql, lag = st.io_running, st.sql_running, st.seconds_behind
            details[f"{inst.name}<-{src}"] = {"io": io, "sql": sql, "seconds_behind": lag, "error": st.last_error}
            if io != "Yes" or sql != "Yes":
                problems.append(f"{inst.name} <- {src} is not running (io {io}, sql {sql}) {st.last_error}".strip())
            elif lag is None or float(lag) > params.max_lag_s:
                problems.append(f"{inst.name} <- {src} is {lag}s behind (limit {params.max_lag_s:g}s)")
    if problems:
        return False, "; ".join(problems), details
    return True, f"{len(details)} connection(s) running, each within {params.max_lag_s:g}s", details


# -- provision -------------------------------------------------------------------------

def _answers(ctx: RunContext, name: str) -> bool:
    try:
        if Inspector(_srv(ctx, name)).reachable():
            return True
    except DbmigrateError:
        pass
    _res(ctx).servers.forget(name)
    return False


def _provision(inst: PlannedInstance):
    def run(ctx: RunContext) -> str:
        if ctx.dry_run:
            return f"would create {inst.name} on {inst.host}"
        provisioner = provisioner_for(inst)
        if inst.sandbox and provisioner is None:
            raise ConsolidateError(f"{inst.name} is planned on sandbox host {inst.sandbox}, and no sandbox "
                                   "provisioner is installed in this process",
                                   hint="run the playbook with the dbmigrate command (it installs the provisioner)")
        if provisioner is not None:
            address = provisioner.create(inst)
            with ConsolidateState.edit(ctx.state) as st:
                st.instances[inst.name] = address
        elif not _answers(ctx, inst.name):
            raise ConsolidateError(
                f"{inst.name} does not answer at {inst.address}:{inst.port} on host {inst.host}",
                hint=f"create it (datadir {inst.datadir}, settings: {', '.join(f'{k}={v}' for k, v in inst.config.items())}), "
                     "e.g. from a before_phase hook, then: dbmigrate resume RUN")
        # Nothing may write here but replication until the cutover opens it.
        _applier(ctx, inst.name).set_read_only(True)
        return (f"{inst.name} on {inst.host} answers at {_addr(ctx, inst.name)} "
                f"(buffer pool {inst.buffer_pool_mb} MB), read-only until its cutover")

    def check(ctx: RunContext) -> bool:
        return not ctx.dry_run and (inst.name in _state(ctx).instances or not inst.sandbox) \
            and _answers(ctx, inst.name)

    return FunctionStep(f"provision {inst.name} on {inst.host}", run, check=check,
                        describe=lambda c: [(inst.name, f"create mysqld {inst.name} on {inst.host}: "
                                                        + ", ".join(f"{k}={v}" for k, v in inst.config.items()))])


# -- seed ----------------------------------------------------------------------------

_COORDS = re.compile(r"CHANGE MASTER TO MASTER_LOG_FILE='([^']+)',\s*MASTER_LOG_POS=(\d+)")


def dump_coordinates(head: str) -> tuple[str, int]:
    """Binlog (file, pos) of the snapshot, from the comment --master-data=2 writes."""
    m = _COORDS.search(head)
    if not m:
        raise ConsolidateError("the dump carries no binlog coordinates",
                               hint="the source needs log_bin, and the dump --master-data=2 (RELOAD privilege)")
    return m.group(1), int(m.group(2))


def dump_command(defaults_file: str, shards: list[str]) -> list[str]:
    # --master-data=2 takes a brief global read lock to read the coordinates that
    # match the consistent snapshot; no password ever reaches argv.
    return ["mariadb-dump", f"--defaults-file={defaults_file}", "--single-transaction", "--master-data=2",
            "--routines", "--triggers", "--events", "--hex-blob", "--default-character-set=utf8mb4",
            "--databases", *shards]


def import_command(defaults_file: str) -> list[str]:
    # The copy is a restore: kept out of the instance's binlog, so the first events
    # there are the ones replicated from the old servers.
    return ["mariadb", f"--defaults-file={defaults_file}", "--init-command=SET SESSION sql_log_bin=0",
            "--default-character-set=utf8mb4"]


def _like_to_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out += re.escape(pattern[i + 1])
            i += 2
            continue
        out += ".*" if c == "%" else "." if c == "_" else re.escape(c)
        i += 1
    return re.compile(f"^{out}$")


_DB_GRANT = re.compile(r"^GRANT .+ ON `((?:[^`]|``)+)`\.\* TO ")


def grants_for_shards(grants: list[str], shards: list[str]) -> list[str]:
    """Schema-level GRANT lines whose schema (or LIKE pattern) covers one of the shards."""
    out = []
    for g in grants:
        m = _DB_GRANT.match(g)
        if m and any(_like_to_regex(m.group(1).replace("``", "`")).match(s) for s in shards):
            out.append(g)
    return out


def _copy_app_grants(ctx: RunContext, source: str, instance: str, shards: list[str]) -> int:
    app = _res(ctx).app
    if app is None:
        return 0
    src, dst = Inspector(_srv(ctx, source)), Inspector(_srv(ctx, instance))
    applier = _applier(ctx, instance)
    copied = 0
    for host in src.user_hosts(app.user):
        if not dst.account_exists(app.user, host):
            applier.replay_account_statement(src.create_user_statement(app.user, host))
        for g in grants_for_shards(src.grants(app.user, host), shards):
            applier.replay_account_statement(g)
            copied += 1
    return copied


def _seed(inst: PlannedInstance, source: str):
    conn = connection_name(source)

    def run(ctx: RunContext) -> str:
        shards = shards_of(_plan(ctx), inst.name, source)
        if ctx.dry_run:
            return f"would copy {', '.join(shards)} from {source} to {inst.name}"
        src_srv, dst_srv = _srv(ctx, source), _srv(ctx, inst.name)
        started = ctx.clock.monotonic()
        with tempfile.TemporaryDirectory(prefix="dbmigrate-seed-") as tmp, \
                private_defaults_file(src_srv.credentials, src_srv.host, src_srv.port) as src_cnf, \
                private_defaults_file(dst_srv.credentials, dst_srv.host, dst_srv.port) as dst_cnf:
            dump = Path(tmp) / "seed.sql"
            with open(dump, "wb") as out:
                p = subprocess.run(dump_command(src_cnf, shards), stdout=out, stderr=subprocess.PIPE,
                                   timeout=params_of(ctx).seed_timeout_s)
            if p.returncode != 0:
                raise ConsolidateError(f"mariadb-dump of {', '.join(shards)} on {source} failed: "
                                       f"{p.stderr.decode(errors='replace').strip()[-400:]}")
            with open(dump, "rb") as f:
                log_file, log_pos = dump_coordinates(f.read(64 * 1024).decode(errors="replace"))
            with open(dump, "rb") as inp:
                p = subprocess.run(import_command(dst_cnf), stdin=inp, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, timeout=params_of(ctx).seed_timeout_s)
            if p.returncode != 0:
                raise ConsolidateError(f"loading {', '.join(shards)} into {inst.name} failed: "
                                       f"{p.stderr.decode(errors='replace').strip()[-400:]}")
            size = dump.stat().st_size
        grants = _copy_app_grants(ctx, source, inst.name, shards)
        host, _, port = _addr(ctx, source).rpartition(":")
        a = _applier(ctx, inst.name)
        a.add_source(conn, host, int(port), _res(ctx).repl, log_file, log_pos, wild_patterns(shards))
        a.start_source(conn)
        return (f"copied {', '.join(shards)} from {source} to {inst.name} ({size / 1024:.0f} KiB in "
                f"{ctx.clock.monotonic() - started:.1f}s, {grants} grant(s)); connection '{conn}' replicates them "
                f"from {log_file}:{log_pos}")

    def check(ctx: RunContext) -> bool:
        if _is_cut(ctx, source):
            return True  # cut over: the forward connection was dropped on purpose
        if ctx.dry_run and inst.name not in _state(ctx).instances and inst.sandbox:
            return False
        try:
            return Inspector(_srv(ctx, inst.name)).connection_status(conn) is not None
        except DbmigrateError:
            return False

    def undo(ctx: RunContext) -> str:
        shards = shards_of(_plan(ctx), inst.name, source)
        a = _applier(ctx, inst.name)
        if Inspector(_srv(ctx, inst.name)).connection_status(conn) is not None:
            a.remove_source(conn)
        for s in shards:
            a.drop_schema_without_binlog(s)
        return f"{inst.name}: connection '{conn}' removed, copies of {', '.join(shards)} dropped"

    def describe(ctx: RunContext):
        shards = shards_of(_plan(ctx), inst.name, source)
        return [(source, " ".join(dump_command("<private defaults file>", shards))),
                (inst.name, " ".join(import_command("<private defaults file>")) + " < dump"),
                (inst.name, f"CHANGE MASTER '{conn}' TO ... (coordinates from the dump); "
                            f"replicate_wild_do_table={','.join(wild_patterns(shards))}; START SLAVE '{conn}'")]

    return FunctionStep(f"seed {inst.name} from {source}", run, check=check, undo=undo, describe=describe)


def params_of(ctx: RunContext) -> ConsolidateParams:
    return ctx.params


# -- cutover -----------------------------------------------------------------------------

def _end_app_sessions(ctx: RunContext, name: str) -> int:
    """Let in-flight transactions finish (they fail on commit otherwise), then end client sessions."""
    if ctx.dry_run:
        return 0
    insp = Inspector(_srv(ctx, name))
    done = drain(insp, _applier(ctx, name), protected_users(insp, _res(ctx).repl.user),
                 timeout_s=params_of(ctx).drain_timeout_s, until="transactions", clock=ctx.clock)
    return done.ended


def cutover(ctx: RunContext, source: str) -> str:
    """Fence one old server and move all its shards to their instances (see the module doc)."""
    plan, p = _plan(ctx), params_of(ctx)
    targets = targets_of(plan, source)
    old_addr = _addr(ctx, source)
    if ctx.dry_run:
        return f"would fence {source} and route its shards to {', '.join(t.name for t in targets)}"
    src = Inspector(_srv(ctx, source))
    started = ctx.clock.monotonic()
    _applier(ctx, source).set_read_only(True)
    try:
        killed = _end_app_sessions(ctx, source)
        log_file, log_pos = src.binlog_coordinates()
        checked = 0
        for t in targets:
            t_insp = Inspector(_srv(ctx, t.name))
            if not t_insp.wait_for_position(connection_name(source), log_file, log_pos, p.catchup_timeout_s):
                raise ConsolidateError(f"{t.name} did not apply {source}'s final position {log_file}:{log_pos} "
                                       f"within {p.catchup_timeout_s:g}s",
                                       hint=f"check the connection: SHOW SLAVE '{connection_name(source)}' STATUS "
                                            f"on {t.name}; {source} was unfenced")
            if p.checksum:
                checked += _compare_checksums(ctx, source, t.name, shards_of(plan, t.name, source))
        caught_ms = (ctx.clock.monotonic() - started) * 1000
        reverse: dict[str, list] = {}
        for t in targets:
            t_file, t_pos = Inspector(_srv(ctx, t.name)).binlog_coordinates()
            host, _, port = _addr(ctx, t.name).rpartition(":")
            a = _applier(ctx, source)
            a.add_source(connection_name(t.name), host, int(port), _res(ctx).repl, t_file, t_pos,
                         wild_patterns(shards_of(plan, t.name, source)))
            a.start_source(connection_name(t.name))
            reverse[t.name] = [t_file, t_pos]
        with ConsolidateState.edit(ctx.state) as st:
            st.reverse[source] = reverse
        moved = []
        for t in targets:
            _applier(ctx, t.name).set_read_only(False)
            for shard in shards_of(plan, t.name, source):
                _route(ctx, shard).switch_writer(_addr(ctx, t.name), old=old_addr)
                moved.append(f"{shard}->{t.name}")
        fenced_ms = (ctx.clock.monotonic() - started) * 1000
        with ConsolidateState.edit(ctx.state) as st:
            st.cut[source] = CutRecord(targets=[t.name for t in targets], at=ctx.clock.now())
        ctx.metric("fenced_window_ms", fenced_ms, "ms", source=source)
    except BaseException:
        try:
            ctx.log(f"cutover of {source} failed: {_undo_cutover(ctx, source)}", "warning")
        except Exception as undo_exc:  # keep the original error; say what is left to do
            ctx.log(f"putting {source} back failed too: {undo_exc}; run: dbmigrate rollback {ctx.run_id}", "error")
        raise
    for t in targets:  # not needed to open writes, so after the route switch
        _applier(ctx, t.name).remove_source(connection_name(source))
    return (f"fenced {source} ({killed} app session(s) ended), caught up in {caught_ms:.0f} ms, "
            f"{checked} table(s) checksummed equal, routes {', '.join(moved)} after {fenced_ms:.0f} ms; "
            f"{source} replicates them back for rollback")


def _compare_checksums(ctx: RunContext, source: str, instance: str, shards: list[str]) -> int:
    old, new = Inspector(_srv(ctx, source)), Inspector(_srv(ctx, instance))
    results = dict(_state(ctx).checksums)
    n = 0
    for shard in shards:
        a, b = old.table_checksums(shard), new.table_checksums(shard)
        results[shard] = {"old": a, "new": b}
        diff = sorted(t for t in set(a) | set(b) if a.get(t) != b.get(t))
        if diff:
            _save_checksums(ctx, results)
            raise SafetyError(f"CHECKSUM TABLE differs between {source} and {instance} for "
                              f"{', '.join(f'{shard}.{t}' for t in diff)}",
                              hint=f"{source} was unfenced; compare the tables, then re-seed the instance")
        n += len(a)
    _save_checksums(ctx, results)
    return n


def _save_checksums(ctx: RunContext, results: dict[str, Any]) -> None:
    with ConsolidateState.edit(ctx.state) as st:
        st.checksums = results


def _undo_cutover(ctx: RunContext, source: str) -> str:
    """Route the source's shards back after it applied every write its instances took."""
    plan, p = _plan(ctx), params_of(ctx)
    targets = targets_of(plan, source)
    old_addr = _addr(ctx, source)
    reverse = _state(ctx).reverse.get(source) or {}
    src = Inspector(_srv(ctx, source))
    back = []
    for t in targets:
        shards = shards_of(plan, t.name, source)
        routed_here = [s for s in shards if _route(ctx, s).current().writer == _addr(ctx, t.name)]
        conn = connection_name(t.name)
        if t.name in reverse and src.connection_status(conn) is not None:
            if routed_here:
                # Fences every shard on the instance for a moment; rollback undoes newest first,
                # so the others move back right after or are reopened below.
                _applier(ctx, t.name).set_read_only(True)
                _end_app_sessions(ctx, t.name)
            t_file, t_pos = Inspector(_srv(ctx, t.name)).binlog_coordinates()
            if not src.wait_for_position(conn, t_file, t_pos, p.catchup_timeout_s):
                raise ConsolidateError(f"{source} did not apply {t.name}'s writes up to {t_file}:{t_pos} "
                                       f"within {p.catchup_timeout_s:g}s; the routes still point at {t.name}",
                                       hint=f"check SHOW SLAVE '{conn}' STATUS on {source}, then: dbmigrate rollback RUN")
            for s in routed_here:
                _route(ctx, s).switch_writer(old_addr, old=_addr(ctx, t.name))
                back.append(s)
            _applier(ctx, source).remove_source(conn)
        elif routed_here:
            raise SafetyError(f"{', '.join(routed_here)} route to {t.name} but {source} has no reverse connection: "
                              "routing back would lose the writes made there", hint="copy them back by hand first")
        still_here = [s for s in t.shards if _route(ctx, s).current().writer == _addr(ctx, t.name)]
        if still_here:
            _applier(ctx, t.name).set_read_only(False)
    _applier(ctx, source).set_read_only(False)
    with ConsolidateState.edit(ctx.state) as st:
        st.reverse.pop(source, None)
        st.cut.pop(source, None)
    routed = f"routes {', '.join(back)} back to {source}" if back else "no route had moved"
    return f"{routed}; {source} is writable again"


def _cutover_step(source: str, targets: list[str]) -> FunctionStep:
    def check(ctx: RunContext) -> bool:
        return not ctx.dry_run and _is_cut(ctx, source)

    def verify(ctx: RunContext) -> None:
        if ctx.dry_run:
            return
        plan = _plan(ctx)
        wrong = []
        for t in targets_of(plan, source):
            for shard in shards_of(plan, t.name, source):
                writer = _route(ctx, shard).current().writer
                if writer != _addr(ctx, t.name):
                    wrong.append(f"{shard} routes to {writer}")
            if Inspector(_srv(ctx, t.name)).read_only():
                wrong.append(f"{t.name} is read-only")
        if not Inspector(_srv(ctx, source)).read_only():
            wrong.append(f"{source} is writable")
        if wrong:
            raise SafetyError(f"after the cutover of {source}: " + "; ".join(wrong))

    def describe(ctx: RunContext):
        return [(source, "SET GLOBAL read_only=ON; KILL CONNECTION <app sessions>; SHOW MASTER STATUS"),
                *[(t, f"SELECT MASTER_POS_WAIT(<final file>, <final pos>, {params_of(ctx).catchup_timeout_s:g}, "
                      f"'{connection_name(source)}'); CHECKSUM TABLE <every table of its shards>") for t in targets],
                *[(source, f"CHANGE MASTER '{connection_name(t)}' TO <{t} binlog position> (reverse, for rollback); "
                           f"START SLAVE '{connection_name(t)}'") for t in targets],
                *[(t, "SET GLOBAL read_only=OFF") for t in targets],
                ("routes", f"DSN file: each shard of {source} -> its instance"),
                *[(t, f"STOP SLAVE '{connection_name(source)}'; RESET SLAVE '{connection_name(source)}' ALL")
                  for t in targets]]

    return FunctionStep(f"cut over {source} -> {', '.join(targets)}", lambda c: cutover(c, source), check=check,
                        verify=verify, undo=lambda c: _undo_cutover(c, source), describe=describe)


def _publish_routes(ctx: RunContext) -> str:
    """Each shard's DSN entry names its old server (added where missing, never overwritten)."""
    plan = _plan(ctx)
    added = []
    for s in plan.shards:
        r = _route(ctx, s.name)
        if r.current().writer is None:
            if not ctx.dry_run:
                r.switch_writer(_addr(ctx, s.source))
            added.append(s.name)
    routes = _res(ctx).routes
    return f"routes of {', '.join(added)} added to {routes}" if added else \
        f"all {len(plan.shards)} shard routes present in {routes}"


def _verify(ctx: RunContext) -> str:
    plan = _plan(ctx)
    if ctx.dry_run:
        return "would check each shard's route and instance"
    wrong = []
    for inst in plan.instances:
        if Inspector(_srv(ctx, inst.name)).read_only():
            wrong.append(f"{inst.name} is read-only")
        for shard in inst.shards:
            writer = _route(ctx, shard).current().writer
            if writer != _addr(ctx, inst.name):
                wrong.append(f"{shard} routes to {writer}, not {inst.name}")
    if wrong:
        raise SafetyError("after consolidation: " + "; ".join(wrong))
    return (f"{len(plan.shards)} shard(s) route to {len(plan.instances)} instance(s), all writable: "
            + "; ".join(f"{i.name}: {', '.join(i.shards)}" for i in plan.instances))


# -- the procedure ---------------------------------------------------------------------

def build_phases(ctx: RunContext, params: ConsolidateParams) -> list[Phase]:
    resources = typed(ctx, ConsolidateResources)
    plan = resources.plan if resources is not None else ctx.resources.get(PLAN_ONLY)
    if plan is None:  # `dbmigrate plan` builds without resources: read the plan file only
        playbook = ctx.resources.get("playbook")
        plan = load_plan(plan_path(playbook, params)) if playbook is not None else None
        if plan is None:
            raise UsageError("consolidate needs its plan file")
        ctx.resources[PLAN_ONLY] = plan
    sources = sorted({s.source for s in plan.shards})
    seeds = [_seed(inst, src) for inst in plan.instances for src in inst.sources]
    cutovers = [_cutover_step(src, [t.name for t in targets_of(plan, src)]) for src in sources]
    return [
        Phase("preflight", [FunctionStep("publish shard routes", _publish_routes)],
              gates=[AutoGate("preflight", lambda c: evaluate_preflight(c, params))]),
        Phase("provision", [_provision(inst) for inst in plan.instances]),
        Phase("seed", seeds),
        Phase("cutover", cutovers, gates=[AutoGate("caught-up", lambda c: evaluate_caught_up(c, params))]),
        Phase("verify", [FunctionStep("verify shard routes", _verify, mutating=False)]),
    ]


@register("consolidate", params=ConsolidateParams, prepare_resources=prepare,
          gates={"caught-up": evaluate_caught_up},
          description="move logical shards from old servers onto planned multi-instance hosts")
def build(ctx: RunContext, params: ConsolidateParams) -> Procedure:
    """Consolidate shards: provision, seed + filtered replication, per-server fence and route switch."""
    # A failed cutover puts its own old server back; earlier ones stay done (each old
    # server is either fully moved or untouched), so a failure does not undo the seeds.
    return Procedure("consolidate", build_phases(ctx, params), rollback_on_failure=False)
