"""Seeding an instance from an old server, then a filtered replication connection from the
copy's position. Physical (mariadb-backup, see physical_seed.py) for an instance fed by one
old server of the same version; logical (mariadb-dump plus the application's grants) for
merges, across versions, or where the playbook asks for it."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from dbmigrate.db.credentials import private_defaults_file
from dbmigrate.db.grants import lines_for
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.step import FunctionStep
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.consolidate.plan import PlannedInstance, connection_name
from dbmigrate.procedures.consolidate.accounts import copy_accounts, differences, shard_accounts, try_login
from dbmigrate.procedures.consolidate.physical_seed import describe_physical, physical_blockers, seed_physically, ticking
from dbmigrate.procedures.consolidate.throttle import mb_text
from dbmigrate.procedures.consolidate.context import (
    ConsolidateContext,
    ConsolidateError,
    address_of,
    applier_of,
    edit_state,
    is_cut,
    plan_of,
    resources_of,
    server_of,
    shards_of,
    state_of,
    wild_patterns,
)
from dbmigrate.tools.dump import DumpFailed, dump_command, dump_schemas, import_command, load_dump


_COORDS = re.compile(r"CHANGE MASTER TO MASTER_LOG_FILE='([^']+)',\s*MASTER_LOG_POS=(\d+)")


def dump_coordinates(head: str) -> tuple[str, int]:
    """Binlog (file, pos) of the snapshot, from the comment --master-data=2 writes."""
    m = _COORDS.search(head)
    if not m:
        raise ConsolidateError("the dump carries no binlog coordinates",
                               hint="the source needs log_bin, and the dump --master-data=2 (RELOAD privilege)")
    return m.group(1), int(m.group(2))


def grants_for_shards(grants: list[str], shards: list[str]) -> list[str]:
    """GRANT lines that give something on one of the shards (schema, table, column, routine)."""
    return [g.text for g in lines_for(grants, shards)]


def copy_accounts_to(ctx: ConsolidateContext, source: str, instance: str, shards: list[str]) -> tuple[int, int]:
    """Every account with a privilege on the shards, at every level, created on the instance as
    it is on the old server with those grants; then checked: each exists, authenticates the
    same, holds its grants and finds its tables there, and the inventory's app account logs in
    and reaches them. Returns (accounts, grant lines)."""
    src, dst = Inspector(server_of(ctx, source)), Inspector(server_of(ctx, instance))
    exclude = {src.login_user, resources_of(ctx).repl.user}
    accounts = shard_accounts(src, shards, include_global=ctx.params.seed.global_grants, exclude=exclude)
    lines = copy_accounts(src, dst, applier_of(ctx, instance), accounts)
    problems = differences(src, dst, accounts, shards)
    app = resources_of(ctx).app
    if app is not None and any(u == app.user for u, _h in accounts.grants):
        try:
            try_login(f"{instance} as {app.user}", address_of(ctx, instance), app, shards)
        except DbmigrateError as e:
            if "read-only" not in e.message:  # the instance opens at the cutover
                problems.append(f"{app.user} cannot work there: {e.message}")
    if problems:
        raise ConsolidateError(f"after copying the accounts of {', '.join(shards)} to {instance}: "
                               + "; ".join(problems), hint="fix the accounts on the instance, then resume")
    return len(accounts.users), lines


def choose_method(ctx: ConsolidateContext, inst: PlannedInstance, source: str) -> tuple[str, str]:
    """(physical|logical, why): the playbook's choice, or for `auto` what this pair allows."""
    method = ctx.params.seed.method
    if method == "logical":
        return "logical", "the playbook asks for a logical copy"
    blockers = physical_blockers(ctx, inst, source)
    if method == "physical" and blockers:
        raise ConsolidateError(f"{inst.name} cannot be seeded physically from {source}: {'; '.join(blockers)}",
                               hint="fix that, or set seed.method: logical (or auto) in the playbook")
    if blockers:
        return "logical", "logical copy: " + "; ".join(blockers)
    return "physical", "physical copy (one old server, same version, both hosts reachable)"


def seed_logically(ctx: ConsolidateContext, inst: PlannedInstance, source: str) -> str:
    conn = connection_name(source)
    shards = shards_of(plan_of(ctx), inst.name, source)
    src_srv, dst_srv = server_of(ctx, source), server_of(ctx, inst.name)
    started = ctx.clock.monotonic()
    with tempfile.TemporaryDirectory(prefix="dbmigrate-seed-") as tmp, \
            private_defaults_file(src_srv.credentials, src_srv.host, src_srv.port) as src_cnf, \
            private_defaults_file(dst_srv.credentials, dst_srv.host, dst_srv.port) as dst_cnf:
        dump = Path(tmp) / "seed.sql"
        said = f"seed {inst.name} from {source}"
        try:
            with ticking(ctx, f"{said}: dumping {', '.join(shards)} (mariadb-dump)",
                         detail=lambda: f"{mb_text(dump.stat().st_size)} dumped"):
                dump_schemas(src_cnf, shards, dump, ctx.params.seed_timeout_s, source)
            with open(dump, "rb") as f:
                log_file, log_pos = dump_coordinates(f.read(64 * 1024).decode(errors="replace"))
            with ticking(ctx, f"{said}: loading the dump ({mb_text(dump.stat().st_size)}) into {inst.name}"):
                load_dump(dst_cnf, dump, ctx.params.seed_timeout_s, inst.name)
        except DumpFailed as e:
            raise ConsolidateError(e.message) from None
        size = dump.stat().st_size
    accounts, grants = copy_accounts_to(ctx, source, inst.name, shards)
    host, _, port = address_of(ctx, source).rpartition(":")
    a = applier_of(ctx, inst.name)
    a.add_source(conn, host, int(port), resources_of(ctx).repl, log_file, log_pos, wild_patterns(shards))
    a.start_source(conn)
    took = ctx.clock.monotonic() - started
    with edit_state(ctx) as st:
        st.seeds[f"{inst.name}<-{source}"] = {"method": "logical", "bytes": size, "total_s": round(took, 2),
                                              "log_file": log_file, "log_pos": log_pos, "grants": grants,
                                              "accounts": accounts}
    return (f"copied {', '.join(shards)} from {source} to {inst.name} ({size / 1024:.0f} KiB in "
            f"{took:.1f}s; {accounts} account(s) with {grants} grant line(s), each checked there); connection '{conn}' replicates them "
            f"from {log_file}:{log_pos}")


def seed_step(inst: PlannedInstance, source: str) -> FunctionStep:
    conn = connection_name(source)

    def run(ctx: ConsolidateContext) -> str:
        shards = shards_of(plan_of(ctx), inst.name, source)
        if ctx.dry_run:
            return f"would copy {', '.join(shards)} from {source} to {inst.name}"
        method, why = choose_method(ctx, inst, source)
        ctx.log(f"seed {inst.name} from {source}: {why}")
        if method == "physical":
            return seed_physically(ctx, inst, source)
        return seed_logically(ctx, inst, source)

    def check(ctx: ConsolidateContext) -> bool:
        if is_cut(ctx, source):
            return True  # cut over: the forward connection was dropped on purpose
        if ctx.dry_run and inst.name not in state_of(ctx).instances and inst.sandbox:
            return False
        try:
            return Inspector(server_of(ctx, inst.name)).connection_status(conn) is not None
        except DbmigrateError:
            return False

    def undo(ctx: ConsolidateContext) -> str:
        shards = shards_of(plan_of(ctx), inst.name, source)
        a = applier_of(ctx, inst.name)
        if Inspector(server_of(ctx, inst.name)).connection_status(conn) is not None:
            a.remove_source(conn)
        for s in shards:
            a.drop_schema_without_binlog(s)
        return f"{inst.name}: connection '{conn}' removed, copies of {', '.join(shards)} dropped"

    def describe(ctx: ConsolidateContext) -> list[tuple[str, str]]:
        shards = shards_of(plan_of(ctx), inst.name, source)
        method = ctx.params.seed.method
        if method == "physical" or (method == "auto" and len(inst.sources) == 1):
            note = [(inst.name, "auto: physical when both hosts are reachable and the versions match, else the "
                                "logical copy")] if method == "auto" else []
            return note + describe_physical(inst, source, shards)
        return [(source, " ".join(dump_command("<private defaults file>", shards))),
                (inst.name, " ".join(import_command("<private defaults file>")) + " < dump"),
                (inst.name, f"CHANGE MASTER '{conn}' TO ... (coordinates from the dump); "
                            f"replicate_wild_do_table={','.join(wild_patterns(shards))}; START SLAVE '{conn}'")]

    return FunctionStep(f"seed {inst.name} from {source}", run, check=check, undo=undo, describe=describe)
