"""`dbmigrate warm`: warm a server's buffer pool before it takes traffic."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from dbmigrate.exceptions import CommandFailed
from dbmigrate.cli.common import console, err_console, print_json
from dbmigrate.config import Inventory, load_inventory
from dbmigrate.exceptions import GateFailed, UsageError
from dbmigrate.warm import methods as warm_proc
from dbmigrate.warm.copier import HostCopier
from dbmigrate.warm.measure import fmt_ratio


def register(app: typer.Typer) -> None:
    app.command("warm")(warm)


def _tables(arg: Optional[str]) -> list[str]:
    return [t.strip() for t in (arg or "").split(",") if t.strip()]


def _plan(inv: Inventory, slow_log: Optional[Path], source_name: Optional[str], required: bool):
    if slow_log:
        return warm_proc.replay_plan_from_file(slow_log)
    if source_name:
        with inv.open(source_name) as source:
            return warm_proc.replay_plan_from_server(source, copier=HostCopier.for_inventory(inv))
    if required:
        raise UsageError("replay needs a digest: give --slow-log FILE or --from SERVER (its slow log is digested)")
    return None


def _show(result: warm_proc.WarmResult, target_hit_ratio: Optional[float]) -> None:
    t = Table(title=f"warm-up of {result.target} ({result.method}"
                    f"{' from ' + result.source if result.source else ''}, {result.seconds:.1f}s)")
    for col in ("", "before", "after"):
        t.add_column(col, justify="right" if col else "left")
    hb, ha = result.hit_ratio_before, result.hit_ratio_after
    t.add_row("resident pages", f"{result.before.pages_data}", f"{result.after.pages_data}")
    t.add_row("free pages", f"{result.before.pages_free}", f"{result.after.pages_free}")
    t.add_row("hit ratio (sampled reads)", fmt_ratio(hb.ratio if hb else None), fmt_ratio(ha.ratio if ha else None))
    if result.before.pages_by_table is not None:
        for name in sorted(set(result.before.pages_by_table) | set(result.after.pages_by_table or {})):
            t.add_row(f"  pages of {name}", str(result.before.pages_by_table.get(name, 0)),
                      str((result.after.pages_by_table or {}).get(name, 0)))
    console.print(t)
    d = result.details
    if result.method == "dump-load":
        console.print(f"pages dumped {d['pages_dumped']}, loaded {d['pages_loaded']}; space ids "
                      f"{'match' if d['space_ids_match'] else 'differ for ' + ', '.join(d['space_ids']['differing'])}")
        if "fallback" in d:
            console.print(f"[yellow]fallback to replay[/] for {', '.join(d['fallback']['tables'])}")
    if "stopped" in d:
        console.print(f"stopped: {d['stopped']}")
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    ratio = ha.ratio if ha else None
    if target_hit_ratio is not None and (ratio is None or ratio < target_hit_ratio):
        console.print(f"[yellow]hit ratio {fmt_ratio(ratio)} is below the target {fmt_ratio(target_hit_ratio)}[/]: "
                      f"raise --seconds or add --tables")
    console.print(f"[green]{result.sentence()}[/]")


def warm(
    inventory: Path = typer.Option(..., "--inventory", "-i", help="Inventory YAML."),
    target: str = typer.Option(..., "--target", help="Server to warm (name or host:port)."),
    source: Optional[str] = typer.Option(None, "--from", help="Serving server: page list (dump-load) or slow log."),
    method: str = typer.Option("dump-load", "--method", help="dump-load, replay or scan."),
    slow_log: Optional[Path] = typer.Option(None, "--slow-log", help="Slow log (or pt-query-digest JSON) to replay."),
    tables: Optional[str] = typer.Option(None, "--tables", help="schema.table,... to scan and probe."),
    seconds: float = typer.Option(600, "--seconds", help="Time limit for the warm-up."),
    target_hit_ratio: Optional[float] = typer.Option(None, "--target-hit-ratio", help="Stop once reached (0..1)."),
    threads: int = typer.Option(2, "--threads", help="Concurrent reads against the target."),
    per_table: bool = typer.Option(False, "--per-table", help="Resident pages per table (reads INNODB_BUFFER_PAGE: "
                                                               "slow on big pools)."),
    check: bool = typer.Option(False, "--check", help="Only run the warm gate (exit 1 when cold)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result record as JSON."),
):
    """Warm TARGET's InnoDB buffer pool (dump-load, replay or scan) and measure the gain."""
    if method not in warm_proc.METHODS:
        raise UsageError(f"unknown method '{method}'", hint=f"use one of: {', '.join(warm_proc.METHODS)}")
    if target_hit_ratio is not None and not 0 < target_hit_ratio <= 1:
        raise UsageError("--target-hit-ratio is a fraction, e.g. 0.99")
    if source and source == target:
        raise UsageError("--from and --target name the same server")
    inv = load_inventory(inventory)
    _, tspec = inv.find_server(target)
    sspec = inv.find_server(source)[1] if source else None
    wanted = _tables(tables)

    if check:
        return _check(inv, target, wanted, target_hit_ratio or 0.99, json_out)

    # Everything that can be refused is checked before the progress bar starts.
    if method == "dump-load" and not source:
        raise UsageError("dump-load needs --from SERVER (the server whose pages are loaded)")
    plan = None
    if method == "replay" or slow_log or (method == "scan" and not wanted):
        plan = _plan(inv, slow_log, None if method == "dump-load" else source, required=method == "replay")
    if method == "scan" and not wanted and plan is None:
        raise UsageError("scan needs --tables schema.table,... (or --slow-log FILE / --from SERVER to scan the "
                         "tables its queries read)")

    out: Console = err_console if json_out else console
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), TextColumn("{task.fields[msg]}"), console=out, transient=json_out) as bar:
        task = bar.add_task(f"{method} {target}", total=1.0, msg="")

        def on_progress(fraction: float, message: str) -> None:
            bar.update(task, completed=fraction, msg=message[:70])

        common = dict(seconds=seconds, threads=threads, per_table=per_table, on_progress=on_progress)
        with inv.open(target) as tgt:
            if method == "dump-load":
                with inv.open(source) as src:
                    result = warm_proc.dump_load(src, tgt, plan=plan, source_datadir=sspec.datadir,
                                                 target_datadir=tspec.datadir,
                                                 copier=HostCopier.for_inventory(inv), **common)
            elif method == "replay":
                result = warm_proc.replay(tgt, plan, tables=wanted or None, target_hit_ratio=target_hit_ratio,
                                          **common)
            else:
                if not wanted:
                    wanted, _ = warm_proc.expand_numbered_tables(tgt, plan.hot_tables())
                result = warm_proc.scan(tgt, wanted, target_hit_ratio=target_hit_ratio, **common)
    if json_out:
        print_json(result.to_dict())
    else:
        _show(result, target_hit_ratio)


def _check(inv: Inventory, target: str, tables: list[str], ratio: float, json_out: bool) -> None:
    if not tables:
        raise UsageError("--check needs --tables schema.table,... to probe")
    with inv.open(target) as tgt:
        ok, reason, details = warm_proc.warm_gate(tgt, ratio, tables=tables)
    if json_out:
        print_json({"ok": ok, "reason": reason, "details": details})
        if not ok:
            raise CommandFailed(1, f"{target} is not warm: {reason}", hint="warm it, then check again")
        return
    if not ok:
        raise GateFailed(reason, hint="warm it: dbmigrate warm --method dump-load|replay|scan ...")
    console.print(f"[green]warm:[/] {reason}")
