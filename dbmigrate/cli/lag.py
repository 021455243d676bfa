"""`dbmigrate lag watch`: replication lag per replica, once (JSON) or live with a sparkline."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import typer
from rich.live import Live
from rich.console import RenderableType

from dbmigrate.exceptions import CommandFailed
from dbmigrate.app import lag as lag_use
from dbmigrate.app.lag import LagSample
from dbmigrate.cli.common import console, print_json
from dbmigrate.console_table import Col, build, emit, sparkline, styled
from dbmigrate.exceptions import UsageError

cmd = typer.Typer(help="Replication lag: heartbeat (ms), GTID distance, Seconds_Behind_Master.", no_args_is_help=True)



def register(app: typer.Typer) -> None:
    app.add_typer(cmd, name="lag")


def samples_json(samples: list[LagSample]) -> dict:
    return {"replicas": [{"name": s.name, "address": s.address,
                          "lag_ms": None if s.lag_ms is None else round(s.lag_ms, 1),
                          "behind": s.behind, "seconds_behind_master": s.seconds_behind_master,
                          "io_running": s.io_running, "sql_running": s.sql_running, "heartbeat": s.heartbeat,
                          "ok": s.ok, "limit_ms": s.limit_ms, "reason": s.reason}
                         for s in samples]}


def lag_table(samples: list[LagSample], history: dict[str, deque], limit_ms: float, title: str,
              width: int) -> RenderableType:
    cols = [Col("replica", keep=True), Col("lag ms", keep=True, right=True), Col("behind", keep=True),
            Col("SBM", keep=True, right=True), Col("io/sql", keep=True), Col("heartbeat"), Col("history"),
            Col("status")]
    rows = []
    for s in samples:
        lag = "-" if s.lag_ms is None else f"{s.lag_ms:.0f}"
        style = "green" if s.ok else "bold red"
        rows.append([f"{s.name} ({s.address})" if s.name != s.address else s.address, styled(lag, style),
                     ",".join(f"{d}:{n}" for d, n in s.behind.items()) or "-",
                     "NULL" if s.seconds_behind_master is None else str(s.seconds_behind_master),
                     f"{s.io_running or '-'}/{s.sql_running or '-'}", s.heartbeat,
                     sparkline(list(history.get(s.address, [])), limit_ms), styled(s.reason, style)])
    return build(width, cols, rows, title=title)


@cmd.command("watch")
def watch(inventory: Path = typer.Option(..., "--inventory", "-i", help="Inventory YAML."),
          cluster: str = typer.Option(..., "--cluster", "-c", help="Cluster name in the inventory."),
          once: bool = typer.Option(False, "--once", help="One sample (writes one heartbeat), then exit."),
          json_out: bool = typer.Option(False, "--json", help="With --once: JSON lines (a result record, then a summary record)."),
          interval: float = typer.Option(1.0, "--interval", min=0.05, help="Seconds between samples."),
          limit_ms: float = typer.Option(1000.0, "--limit-ms", min=0, help="Lag above this is flagged."),
          count: int = typer.Option(0, "--count", min=0, help="Stop after N samples (0: until Ctrl-C)."),
          pt_heartbeat: str = typer.Option(None, "--pt-heartbeat", metavar="DB.TABLE",
                                           help="Read pt-heartbeat's table (e.g. percona.heartbeat) instead of "
                                                "writing our own heartbeat.")):
    """Lag per replica: heartbeat lag in ms, transactions behind per GTID domain, Seconds_Behind_Master.

    Without a running heartbeat writer, --once writes one heartbeat and waits up to limit+500 ms for each
    replica to apply it; a live watch runs its own writer (every 100 ms) for as long as it runs.
    """
    if json_out and not once:
        raise UsageError("--json needs --once", hint="dbmigrate lag watch ... --once --json")
    with lag_use.open_lag_target(inventory, cluster, pt_heartbeat) as target:
        if once:
            samples = lag_use.sample_once(target, limit_ms)
            if json_out:
                print_json(samples_json(samples))
            else:
                emit(console, lag_table(samples, {}, limit_ms, target.title, console.width))
            if not all(s.ok for s in samples):
                raise CommandFailed(1, "; ".join(f"{s.name}: {s.reason}" for s in samples if not s.ok),
                                    hint="lag over the limit or replication stopped: see the table above")
            return
        _live(target, interval, limit_ms, count)


def _live(target, interval: float, limit_ms: float, count: int) -> None:
    history: dict[str, deque] = {}
    with Live(console=console, auto_refresh=False) as live:
        for samples, own_writer in lag_use.watch(target, interval, limit_ms, count):
            for s in samples:
                history.setdefault(s.address, deque(maxlen=40)).append(s.lag_ms)
            suffix = f" - heartbeat writer {'running' if own_writer else 'external'}"
            live.update(lag_table(samples, history, limit_ms, target.title + suffix, console.width), refresh=True)
