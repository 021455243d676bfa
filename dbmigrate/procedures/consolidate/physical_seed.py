"""Physical seeding: the old server's files copied host to host with mariadb-backup.

    old server's host:  mariadb-backup --backup --stream=xbstream   (credentials in a 0600 file there)
          |  (through this process: paced by the throttle's relay, nothing lands on this machine's disk)
    instance's host:    mbstream -x into a staging directory beside the datadir
                        mariadb-backup --prepare
                        instance stopped, staging directory swapped in, instance started
    instance:           schemas it is not planned to hold dropped (not binlogged),
                        replication from the copy's GTID (its binlog info file)

A physical copy carries the whole server: every schema, and the mysql.* accounts
and grants. The instance keeps only the shards the plan gives it; the others are
dropped once it starts, before replication begins, and the connection's filter
keeps them out from then on. It needs the same MariaDB major version on both
sides, host access to both hosts, and something that can stop and start the
instance (see provision.InstanceControl: the sandbox's provisioner, or the host
layer for an instance running as a `mariadb@NAME` unit or a direct mariadbd); `auto` falls back to a logical copy
when one of these is missing, and says why.
"""

from __future__ import annotations

import shlex
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from dbmigrate.db.credentials import option_file_text
from dbmigrate.db.inspector import Inspector

from dbmigrate.hosts import Host, HostError, NoAccessHost, stream
from dbmigrate.hosts.resolve import host_for, host_for_planned
from dbmigrate.procedures.consolidate.plan import PlannedInstance, connection_name
from dbmigrate.procedures.consolidate.provision import HostControl, InstanceControl, instance_control
from dbmigrate.procedures.consolidate.resources import LIVE_THROTTLE_KEY
from dbmigrate.procedures.consolidate.context import (
    ConsolidateContext,
    ConsolidateError,
    address_of,
    applier_of,
    edit_state,
    plan_of,
    resources_of,
    server_of,
    shards_of,
    wild_patterns,
)
from dbmigrate.procedures.consolidate.backup_phases import COMMIT_LOCKS, LOG_COPY_INTERVAL_MS, BackupPhases
from dbmigrate.procedures.consolidate.throttle import MB, Limits, Meter, Valve, Watcher, random_key, relay
from dbmigrate.procedures.kit.fence import hold_read_only

# MariaDB 10.11's mariadb-backup writes the first; later releases the second.
BINLOG_INFO_FILES = ("xtrabackup_binlog_info", "mariadb_backup_binlog_info")
SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")

# Redo since the source's last checkpoint above which the seed warns: it crosses under the backup's
# commit lock at the copy's end (backup_phases.py), a stall the applications feel.
REDO_WARN_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class BackupPosition:
    log_file: str
    log_pos: int
    gtid: str  # may be empty: a source that never wrote a GTID


def parse_binlog_info(text: str, source_name: str = "the backup") -> BackupPosition:
    """`FILE<TAB>POS[<TAB>GTID]` as mariadb-backup writes it (GTID lists may hold several domains)."""
    fields = text.strip().split("\t") if "\t" in text else text.split()
    if len(fields) < 2 or not fields[1].isdigit():
        raise ConsolidateError(f"{source_name}: the backup's binlog info is not 'file, position[, GTID]': "
                               f"{text.strip()[:120]!r}", hint="the old server needs log_bin")
    gtid = "".join(fields[2:]).replace(" ", "") if len(fields) > 2 else ""
    return BackupPosition(fields[0], int(fields[1]), gtid)


def backup_command(defaults_file: str, target_dir: str, datadir: str) -> list[str]:
    # --defaults-file must come first; the password is in that file, never in argv.
    # --log-copy-interval: under its commit lock the backup waits for one poll of its redo
    # copy thread (1 s by default), a stall every commit on the source feels (backup_phases.py).
    return ["mariadb-backup", f"--defaults-file={defaults_file}", "--backup", "--stream=xbstream",
            f"--target-dir={target_dir}", f"--datadir={datadir}", f"--log-copy-interval={LOG_COPY_INTERVAL_MS}"]


# What mariadb-backup does not stream out of a datadir: binary and relay logs, the redo log
# itself (it streams the redo written during the copy instead), temporary and runtime files.
NOT_COPIED = ("ib_logfile*", "ibtmp*", "ib_buffer_pool", "*.pid", "*.err", "*.sock", "#sql*", "*.dbmigrate-*")


def copy_estimate(host: Host, datadir: str, log_basenames: list[str]) -> Optional[int]:
    """Bytes a physical copy of this datadir will stream, measured before it starts (its files,
    without logs and runtime files); None when the host cannot tell. The redo written during
    the copy comes on top: a copy that outgrows this says so."""
    excludes = list(NOT_COPIED) + [f"{b}.*" for b in log_basenames if b]
    try:
        return host.tree_bytes(datadir, excludes)
    except HostError:
        return None


def extract_command(staging: str) -> list[str]:
    return ["mbstream", "-x", "-C", staging]


def prepare_command(staging: str) -> list[str]:
    return ["mariadb-backup", "--prepare", f"--target-dir={staging}"]


# Replace the datadir with the prepared copy, keeping its owner; the old one stays
# beside it (…dbmigrate-old) until the instance has started on the new one.
_SWAP = r"""
d=$1; s=$2
owner=$(stat -c %U:%G -- "$d") || exit 1
rm -rf -- "$d.dbmigrate-old" || exit 1
mv -- "$d" "$d.dbmigrate-old" || exit 1
mv -- "$s" "$d" || { mv -- "$d.dbmigrate-old" "$d"; exit 1; }
chown -R -- "$owner" "$d" || exit 1
"""


def major_minor(version: str) -> str:
    return ".".join(version.split("-")[0].split(".")[:2])


def physical_blockers(ctx: ConsolidateContext, inst: PlannedInstance, source: str) -> list[str]:
    """Why this instance cannot be seeded physically from `source` (empty: it can)."""
    reasons = []
    if len(inst.sources) > 1:
        reasons.append(f"{inst.name} merges {len(inst.sources)} old servers (a physical copy holds one)")
    inv = resources_of(ctx).inventory
    for label, host in ((source, host_for(inv, source)), (inst.name, host_for_planned(inv, inst))):
        if isinstance(host, NoAccessHost):
            reasons.append(f"no host access to {label}")
    control = instance_control(inst, host_for_planned(inv, inst))
    if control is None:
        reasons.append(f"nothing can stop and start {inst.name} (no host access, or a plan without its socket)")
    elif isinstance(control, HostControl) and not reasons:
        try:
            control.how()  # systemd unit or a live mariadbd: read from the host before anything stops
        except HostError as e:
            reasons.append(e.message)
    if not reasons:
        a = Inspector(server_of(ctx, source)).version()
        b = Inspector(server_of(ctx, inst.name)).version()
        if major_minor(a) != major_minor(b) or "mariadb" not in (a + b).lower():
            reasons.append(f"versions differ or are not MariaDB ({source} {a}, {inst.name} {b})")
    return reasons


def seed_physically(ctx: ConsolidateContext, inst: PlannedInstance, source: str) -> str:
    plan, p = plan_of(ctx), ctx.params
    shards = shards_of(plan, inst.name, source)
    res = resources_of(ctx)
    src_host, dst_host = host_for(res.inventory, source), host_for_planned(res.inventory, inst)
    control = instance_control(inst, dst_host, p.seed_timeout_s)
    if control is None:
        raise ConsolidateError(f"nothing can stop and start {inst.name}", hint="set seed.method: logical")
    if isinstance(control, HostControl):
        ctx.log(f"seed {inst.name} from {source}: {inst.name} runs as {control.how()} on {inst.host}; "
                "it is stopped and started that way")
    src, dst = Inspector(server_of(ctx, source)), Inspector(server_of(ctx, inst.name))
    held = dst.tables_in(dst.schemas())
    if held:
        raise ConsolidateError(f"{inst.name} already holds {held} table(s): physical seeding replaces its whole "
                               "datadir", hint="seed a freshly created instance, or set seed.method: logical")
    datadir = control.datadir(inst).rstrip("/")
    staging = f"{datadir}.dbmigrate-seed"
    started = ctx.clock.monotonic()
    dst_host.run(["rm", "-rf", "--", staging], what=f"clear {staging}")
    dst_host.run(["mkdir", "-p", "--", staging], what=f"create {staging}")
    watcher = copied = None
    workdir = src_host.run(["mktemp", "-d", "/tmp/dbmigrate-seed.XXXXXXXX"], what="make a private work directory").text.strip()
    try:
        cnf = f"{workdir}/backup.cnf"
        spec = res.inventory.find_server(source)[1]
        src_host.write_bytes(cnf, option_file_text(server_of(ctx, source).credentials, spec.host, spec.port).encode(),
                             mode=0o600)
        valve, meter = Valve(), Meter(ctx.clock.monotonic)
        source_datadir = src.datadir()
        estimate = copy_estimate(src_host, source_datadir, src.log_basenames())
        redo = src.redo_since_checkpoint_bytes()
        if redo is not None and redo > REDO_WARN_BYTES:
            ctx.log(f"seed {inst.name} from {source}: {redo / MB:,.0f} MB of redo since {source}'s last checkpoint; "
                    f"the backup streams it at its end under its commit lock, while every commit on {source} "
                    "waits (after a bulk load, seed once its checkpoint age has come down)", "warning")
        under_lock: dict[str, int] = {}

        def on_phase(ph: BackupPhases) -> None:
            if ph.locking:
                valve.set(None)  # at once, not at the watcher's next turn
            if ph.phase in COMMIT_LOCKS:
                under_lock.setdefault("from", meter.bytes)
            elif not ph.locking and "from" in under_lock:
                under_lock.setdefault("to", meter.bytes)

        phases = BackupPhases(ctx.clock.monotonic, on_change=on_phase)
        watcher = _watcher(ctx, inst, source, shards, valve, meter, total=estimate, phases=phases)
        watcher.start()
        stream(src_host, backup_command(cnf, f"{workdir}/target", source_datadir), dst_host, extract_command(staging),
               timeout=p.seed_timeout_s, what=f"stream a physical backup of {source} to {inst.name}",
               relay=relay(valve, meter), on_stderr_line=phases.feed)
        copied = meter.bytes
    finally:
        if watcher is not None:
            watcher.stop()
        src_host.run(["rm", "-rf", "--", workdir], what=f"remove {workdir}", check=False)
    _report(ctx, inst, source, *watcher.progress(finished=True))
    copy_s = ctx.clock.monotonic() - started
    with ticking(ctx, f"seed {inst.name} from {source}: preparing the copy (mariadb-backup --prepare)"):
        dst_host.run(prepare_command(staging), timeout=p.seed_timeout_s, what=f"prepare the copy of {source}")
    pos = read_position(dst_host, staging, source)
    ctx.log(f"seed {inst.name} from {source}: prepared; {inst.name} is stopped, the copy swapped in, started again",
            level="progress")
    control.stop(inst)
    res.servers.forget(inst.name)
    try:
        dst_host.run(["sh", "-c", _SWAP, "sh", datadir, staging], what=f"swap the copy into {datadir}")
    except HostError:
        # The swap puts the old datadir back when it cannot finish: start the instance again
        # rather than leave it down, then report the swap's failure.
        try:
            control.start(inst)
        except Exception as again:  # best effort: the swap's failure is what gets reported
            ctx.log(f"seed {inst.name}: after the failed swap it did not start again either: {again}")
        raise
    address = control.start(inst)
    # The copy brought the source's fencing generation with its datadir: bump the instance again
    # (in the ledger of its handle, the process's; a fresh handle sends nothing until used).
    generations = server_of(ctx, inst.name).ledger.generations
    for where in {address, f"{inst.address}:{inst.port}"}:
        generations.forget(where)
    dst_host.run(["rm", "-rf", "--", f"{datadir}.dbmigrate-old"], what="remove the replaced datadir", check=False)
    dropped = keep_only_shards(ctx, inst, shards)
    a = applier_of(ctx, inst.name)
    hold_read_only(a)  # restarted on the copy: nothing may write here but replication until its cutover
    conn = connection_name(source)
    host, _, port = address_of(ctx, source).rpartition(":")
    if pos.gtid:
        a.add_source_at_gtid(conn, host, int(port), res.repl, pos.gtid, wild_patterns(shards))
        start_at = f"GTID {pos.gtid}"
    else:
        a.add_source(conn, host, int(port), res.repl, pos.log_file, pos.log_pos, wild_patterns(shards))
        start_at = f"{pos.log_file}:{pos.log_pos}"
    a.start_source(conn)
    total_s = ctx.clock.monotonic() - started
    rate = copied / copy_s / MB if copy_s > 0 else 0.0
    assert watcher is not None
    facts: dict[str, Any] = {"method": "physical", "bytes": copied, "copy_s": round(copy_s, 2),
                             "total_s": round(total_s, 2), "rate_mb_s": round(rate, 2), "gtid": pos.gtid,
                             "log_file": pos.log_file, "log_pos": pos.log_pos, "dropped": dropped,
                             "pauses": watcher.pauses, "paused_s": round(watcher.valve.paused_s, 1),
                             "worst_source_p999_ms": watcher.worst_p999_ms,
                             "worst_source_write_p999_ms": watcher.worst_write_p999_ms,
                             "longest_source_write_ms": watcher.longest_write_ms,
                             "backup_lock_s": round(phases.locked_s, 3), "commit_lock_s": round(phases.commit_lock_s, 3),
                             # what crossed while the source's commits waited (mostly the redo tail)
                             "bytes_under_commit_lock": under_lock.get("to", copied) - under_lock.get("from", copied),
                             "estimate_bytes": estimate, "address": address,
                             "redo_since_checkpoint_bytes": redo}
    with edit_state(ctx) as st:
        st.seeds[f"{inst.name}<-{source}"] = facts
    ctx.metric("seed_rate_mb_s", rate, "MB/s", instance=inst.name, source=source)
    paused = f", paused {watcher.pauses}x for {watcher.valve.paused_s:.0f}s" if watcher.pauses else ""
    lock = (f"; the source's commits waited on the backup's lock {phases.commit_lock_s * 1000:.0f} ms "
            f"({facts['bytes_under_commit_lock'] / MB:,.1f} MB crossed meanwhile)")
    return (f"copied {source} physically to {inst.name} ({copied / MB:,.1f} MB in {copy_s:.1f}s, {rate:.1f} MB/s"
            f"{paused}{lock}; prepared and started in {total_s:.1f}s), kept {', '.join(shards)}"
            f"{'; dropped ' + ', '.join(dropped) if dropped else ''}; connection '{conn}' replicates them from "
            f"{start_at}")


@contextmanager
def ticking(ctx: ConsolidateContext, what: str, every_s: float = 10.0,
            detail: Optional[Callable[[], str]] = None) -> Iterator[None]:
    """Say `what` now, then again every `every_s` while the block runs (with `detail()`, e.g. the
    bytes so far): no long wait is silent."""
    ctx.log(what, level="progress")
    done, began = threading.Event(), ctx.clock.monotonic()

    def tick() -> None:
        while not done.wait(every_s):
            more = ""
            if detail is not None:
                try:
                    more = f", {detail()}"
                except Exception:  # noqa: BLE001 - a figure that cannot be read now is left out
                    more = ""
            ctx.log(f"{what}: {ctx.clock.monotonic() - began:.0f} s{more}", level="progress")

    t = threading.Thread(target=tick, daemon=True, name="seed-ticker")
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join(1)


def read_position(host: Host, staging: str, source: str) -> BackupPosition:
    for name in BINLOG_INFO_FILES:
        path = f"{staging}/{name}"
        if host.exists(path):
            return parse_binlog_info(host.read_bytes(path).decode(errors="replace"), source)
    raise ConsolidateError(f"the copy of {source} has no binlog position file ({' or '.join(BINLOG_INFO_FILES)})",
                           hint="the old server needs log_bin; check mariadb-backup's version")


def keep_only_shards(ctx: ConsolidateContext, inst: PlannedInstance, shards: list[str]) -> list[str]:
    """Drop what the copy brought beyond the instance's shards (not binlogged: nothing replicates it)."""
    a = applier_of(ctx, inst.name)
    dropped = []
    for schema in Inspector(server_of(ctx, inst.name)).schemas():
        if schema not in shards and schema not in SYSTEM_SCHEMAS:
            a.drop_schema_without_binlog(schema)
            dropped.append(schema)
    return dropped


@dataclass
class LiveThrottle:
    """The operator's live throttle of a running seed, as last read from the run's journal."""

    mb_s: Optional[float] = None
    held: bool = False
    read: float = 0.0


def _watcher(ctx: ConsolidateContext, inst: PlannedInstance, source: str, shards: list[str], valve: Valve, meter: Meter,
             total: Optional[int], phases: BackupPhases) -> Watcher:
    seed = ctx.params.seed

    live = LiveThrottle()

    def refresh() -> None:
        # `dbmigrate consolidate throttle RUN ...` changes a live run through its journal; read it once a second.
        now = ctx.clock.monotonic()
        if now - live.read >= 1.0:
            st = ctx.state.get(LIVE_THROTTLE_KEY) or {}
            live.mb_s, live.held, live.read = st.get("mb_s"), bool(st.get("paused")), now

    def cap() -> Optional[float]:
        refresh()
        mb_s = live.mb_s if live.mb_s is not None else seed.throttle_mb_s
        return mb_s * MB if mb_s else None

    def held() -> bool:
        refresh()
        return live.held

    return Watcher(valve, meter, probe=probe_for(ctx, source, shards), lag=lambda: replica_lag_s(ctx, source),
                   cap=cap, limits=Limits(cap(), seed.max_source_p999_ms, seed.max_source_lag_s), total_bytes=total,
                   probe_per_s=seed.probe_per_s, window_s=seed.window_s, progress_every_s=seed.progress_every_s,
                   report=lambda text, figures: _report(ctx, inst, source, text, figures), clock=ctx.clock.monotonic,
                   held=held, write_probe=write_probe_for(ctx, source) if seed.write_probe_per_s else None,
                   write_probe_per_s=seed.write_probe_per_s or 1,
                   locked=phases.reason)


def _report(ctx: ConsolidateContext, inst: PlannedInstance, source: str, text: str, figures: dict[str, Any]) -> None:
    ctx.log(f"seed {inst.name} from {source}: {text}", level="progress")
    # The figures ride along as labels: a live board shows % done, ETA and the source's p99.9.
    # total_bytes is never below bytes and pct never 100 before the end (throttle.progress_of).
    def num(key: str, fmt: str = "{}") -> str:
        v = figures.get(key)
        return "" if v is None else fmt.format(v)

    labels = {"bytes": str(figures["bytes"]), "total_bytes": num("total_bytes"), "pct": num("pct"),
              "estimate_bytes": num("estimate_bytes"), "estimate_grown": "1" if figures.get("estimate_grown") else "",
              "eta_s": num("eta_s"), "source_p999_ms": num("source_p999_ms", "{:.1f}"),
              "source_write_p999_ms": num("source_write_p999_ms", "{:.1f}"),
              "longest_write_ms": num("longest_write_ms", "{:.1f}"),
              "throttle": str(figures["throttle"]), "paused_s": str(figures["paused_s"])}
    ctx.metric("seed_rate_mb_s", figures["rate_mb_s"], "MB/s", instance=inst.name, source=source, **labels)


def write_probe_for(ctx: ConsolidateContext, source: str) -> Callable[[], object]:
    """One heartbeat written on the old server (`dbmigrate.heartbeat`, the tool's own row; nothing
    where it is read-only): how long a commit waits there. The instance's filter keeps the row
    out of the copy's replication, and the copy's own dbmigrate schema is dropped with the
    other schemas it does not hold."""
    from dbmigrate.lag import write_heartbeat

    return lambda: write_heartbeat(server_of(ctx, source))


def probe_for(ctx: ConsolidateContext, source: str, shards: list[str]) -> Callable[[], object]:
    """One indexed point read on the biggest integer-keyed shard table (SELECT 1 without one).
    Runs in the watcher's thread, so on a session of its own."""
    keyed = Inspector(server_of(ctx, source)).integer_key_tables(shards)
    if not keyed:
        return lambda: Inspector(server_of(ctx, source)).trivial_round_trip()
    schema, table, column, _ = keyed[0]
    lo, hi = Inspector(server_of(ctx, source)).key_range(schema, table, column)
    lo, hi = int(lo or 0), int(hi or 0)
    return lambda: Inspector(server_of(ctx, source)).point_read(schema, table, column, random_key(lo, hi))


def replica_lag_s(ctx: ConsolidateContext, source: str) -> Optional[float]:
    """Worst Seconds_Behind_Master of the inventory's servers that replicate from `source`."""
    inv = resources_of(ctx).inventory
    cluster, spec = inv.find_server(source)
    worst = None
    for name, other in inv.cluster(cluster).servers.items():
        if other is spec or other.role != "replica":
            continue
        st = Inspector(server_of(ctx, name)).replica_status()
        if st is None or f"{st.source_host}:{st.source_port}" != f"{spec.host}:{spec.port}":
            continue
        lag = st.seconds_behind
        worst = max(worst or 0.0, float(lag)) if lag is not None else worst
    return worst


def describe_physical(inst: PlannedInstance, source: str, shards: list[str]) -> list[tuple[str, str]]:
    staging = "<datadir>.dbmigrate-seed"
    return [(source, shlex.join(backup_command("<private defaults file>", "<work dir>", "<datadir>"))
             + f" | (paced relay) | {inst.name}: " + shlex.join(extract_command(staging))),
            (inst.name, shlex.join(prepare_command(staging)) + "; stop; swap datadir; start"),
            (inst.name, "DROP DATABASE <every schema but " + ", ".join(shards) + "> (sql_log_bin=0)"),
            (inst.name, f"SET GLOBAL gtid_slave_pos=<backup's GTID>; CHANGE MASTER '{connection_name(source)}' TO "
                        f"... MASTER_USE_GTID=slave_pos; replicate_wild_do_table={','.join(wild_patterns(shards))}; "
                        f"START SLAVE '{connection_name(source)}'")]


__all__ = ["BINLOG_INFO_FILES", "ticking", "BackupPosition", "InstanceControl", "backup_command", "describe_physical",
           "parse_binlog_info", "physical_blockers", "seed_physically"]
