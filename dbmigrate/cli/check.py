"""`dbmigrate check`: the preflight gates for promoting a candidate, as a table or JSON.

Exit codes: 0 every gate passed, 1 a gate failed, 2 usage error (bad arguments, unknown candidate).
"""

from __future__ import annotations

from pathlib import Path

import typer
from dbmigrate.exceptions import CommandFailed
from dbmigrate.cli.common import console, print_json
from dbmigrate.console_table import Col, show, styled
from dbmigrate.app.checks import ErrantExplained, GateResult, Limits, explain_errant, preflight


def register(app: typer.Typer) -> None:
    app.command("check")(check)


def show_gates(results: list[GateResult], title: str) -> None:
    show(console, [Col("gate", keep=True), Col("ok", keep=True), Col("reason")],
         [[r.name, styled("pass", "green") if r.ok else styled("FAIL", "bold red"), r.reason] for r in results],
         title=title)


def show_errant(errant: ErrantExplained) -> None:
    """What each errant transaction on the candidate changed, read from its binlog."""
    rows = [[t.gtid, "; ".join(f"{name}: {c.describe()}" for name, c in t.tables.items()) or "no row",
             "; ".join(t.statements) or "-",
             "; ".join(f"{name}: {', '.join(c.rows)}" for name, c in t.tables.items() if c.rows) or "-"]
            for t in errant.transactions]
    if rows:
        show(console, [Col("errant GTID", keep=True), Col("changed"), Col("statement"), Col("rows (first few)")], rows,
             title=f"what the errant transactions on {errant.candidate} changed (from its binlog)")
        console.print("to keep a change, write it on the primary too; either way the GTID stays errant until the "
                      "primary logs a transaction with it (an empty one) or the replica is rebuilt; then check again")
    if errant.note:
        console.print(f"[yellow]errant transactions:[/] {errant.note}")


def check(inventory: Path = typer.Option(..., "--inventory", "-i", help="Inventory YAML."),
          cluster: str = typer.Option(..., "--cluster", "-c", help="Cluster name in the inventory."),
          candidate: str = typer.Option(..., "--candidate", help="Server to promote: inventory name or HOST:PORT."),
          max_lag_ms: float = typer.Option(1000.0, "--max-lag-ms", min=0, help="Replication lag limit (ms)."),
          max_trx_age_s: float = typer.Option(30.0, "--max-trx-age-s", min=0,
                                              help="Oldest open transaction allowed on the primary (s)."),
          min_free_mb: int = typer.Option(1024, "--min-free-mb", min=0,
                                          help="Free disk required on a local candidate datadir, beyond the data."),
          json_out: bool = typer.Option(False, "--json")):
    """Preflight gates before a switchover: replication, lag, errant GTIDs, binlog, versions, filters,
    read_only, long transactions, reverse path, application fence, disk. Exit 0 all pass, 1 a failure, 2 usage."""
    limits = Limits(max_lag_ms=max_lag_ms, max_trx_age_s=max_trx_age_s, min_free_mb=min_free_mb)
    results = preflight(inventory, cluster, candidate, limits)
    ok = all(r.ok for r in results)
    errant = explain_errant(inventory, candidate, results)
    if json_out:
        doc = {"cluster": cluster, "candidate": candidate, "ok": ok, "gates": [r.to_dict() for r in results]}
        if errant is not None:
            doc["errant_transactions"] = [t.to_dict() for t in errant.transactions]
            doc["errant_note"] = errant.note
        print_json(doc)
    else:
        show_gates(results, f"preflight: promote {candidate} in {cluster}")
        if errant is not None:
            show_errant(errant)
        failed = [r.name for r in results if not r.ok]
        console.print("[green]all gates pass[/]" if ok else f"[bold red]{len(failed)} gate(s) failed:[/] {', '.join(failed)}")
    if not ok:
        failed = [r for r in results if not r.ok]
        raise CommandFailed(1, f"{len(failed)} preflight gate(s) failed: "
                               + "; ".join(f"{r.name}: {r.reason}" for r in failed),
                            hint="fix what each failed gate names, then check again")
