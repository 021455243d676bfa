"""`dbmigrate warm`: warm a server's buffer pool before it takes traffic."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from dbmigrate.app.warm import WarmCheck, WarmRequest, WarmResult, fmt_ratio, parse_tables, prepare_warm, warm_check
from dbmigrate.exceptions import CommandFailed
from dbmigrate.cli.common import console, err_console, print_json
from dbmigrate.exceptions import GateFailed


def register(app: typer.Typer) -> None:
    app.command("warm")(warm)


def _show(result: WarmResult, target_hit_ratio: Optional[float]) -> None:
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
    req = WarmRequest(inventory=inventory, target=target, source=source, method=method, slow_log=slow_log,
                      tables=parse_tables(tables), seconds=seconds, target_hit_ratio=target_hit_ratio,
                      threads=threads, per_table=per_table)
    if check:
        return _check(target, warm_check(req, target_hit_ratio or 0.99), json_out)

    run = prepare_warm(req)  # everything that can be refused is checked before the progress bar starts
    out: Console = err_console if json_out else console
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), TextColumn("{task.fields[msg]}"), console=out, transient=json_out) as bar:
        task = bar.add_task(f"{method} {target}", total=1.0, msg="")

        def on_progress(fraction: float, message: str) -> None:
            bar.update(task, completed=fraction, msg=message[:70])

        result = run(on_progress)
    if json_out:
        print_json(result.to_dict())
    else:
        _show(result, target_hit_ratio)


def _check(target: str, verdict: WarmCheck, json_out: bool) -> None:
    if json_out:
        print_json({"ok": verdict.ok, "reason": verdict.reason, "details": verdict.details})
        if not verdict.ok:
            raise CommandFailed(1, f"{target} is not warm: {verdict.reason}", hint="warm it, then check again")
        return
    if not verdict.ok:
        raise GateFailed(verdict.reason, hint="warm it: dbmigrate warm --method dump-load|replay|scan ...")
    console.print(f"[green]warm:[/] {verdict.reason}")
