"""`dbmigrate shape capture`: a production database's shape, without its data, for rehearsals."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from dbmigrate.app import shape as shape_use
from dbmigrate.cli.common import console, err_console, print_json

cmd = typer.Typer(help="A database's shape (schema, sizes, column statistics, accounts, sessions, query classes).",
                  no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(cmd, name="shape")


@cmd.command("capture")
def capture(inventory: Path = typer.Option(..., "--inventory", "-i", help="Inventory file."),
            cluster: str = typer.Option(..., "--cluster", "-c", help="Cluster to read."),
            out: Path = typer.Option(..., "--out", "-o", help="Directory for shape.json, schema.sql, digest.json."),
            schema: Optional[list[str]] = typer.Option(None, "--schema", help="Only these schemas (repeat)."),
            seconds: float = typer.Option(0, "--seconds", help="Also digest this long a query window on the "
                                                               "primary (0: no digest)."),
            server: Optional[str] = typer.Option(None, "--server", help="Read the schema here (default: a replica, "
                                                                        "else the primary)."),
            literals: bool = typer.Option(False, "--literals", help="Keep the literals of the digest's samples."),
            window: str = typer.Option("auto", "--window", help="How the query window is read: wire (tcpdump of "
                                       "the primary's port, dissected by tshark: every statement, prepared ones "
                                       "and sessions with their own long_query_time too; root or CAP_NET_RAW on "
                                       "its host), performance_schema (its statement digests: no prepared "
                                       "statement in MariaDB), slow_log (a long_query_time=0 window: not sessions "
                                       "that set their own), or auto (the one that would miss least, said why)."),
            allow_empty: bool = typer.Option(False, "--allow-empty", help="A window that captured no query class "
                                             "only warns (default: it fails)."),
            share: float = typer.Option(shape_use.DEFAULT_SHARE, "--share", help="The share of the time the "
                                        "capture's reads may take: each read is followed by a pause (0.05: a read "
                                        "of 10 ms, then 190 ms of nothing; 1: no pause)."),
            nice: int = typer.Option(shape_use.NICE, "--nice", help="Run the capture this much lower in CPU "
                                     "priority (0: unchanged), for a tool on the database host."),
            sample: int = typer.Option(1, "--sample", help="A slow-log window logs 1 statement in N "
                                       "(log_slow_rate_limit; counts scaled back by N): less of the primary's "
                                       "time spent logging, rare classes may be missed."),
            as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON.")) -> None:
    """Capture the shape of a cluster's databases into DIR (no row of data is written)."""
    shape, written = shape_use.capture(inventory, cluster, out, schemas=schema or None, seconds=seconds,
                                       server=server, literals=literals, via=window, share=share, nice=nice,
                                       sample=sample, allow_empty=allow_empty,
                                       progress=lambda m: err_console.print(m, markup=False))
    tables = sum(len(s["tables"]) for s in shape.schemas.values())
    summary = {"schemas": list(shape.schemas), "tables_and_views": tables, "accounts": len(shape.accounts),
               "roles": len(shape.roles), "proxy_grants": sum(len(a["proxies"]) for a in shape.accounts),
               "sessions_visible": bool(shape.sessions.get("available")), "digest": shape.digest, "digest_source": shape.digest_source,
               "digest_classes": shape.digest_classes,
               "took_s": round(shape.took_s, 2), "paced": shape.paced, "files": [str(p) for p in written]}
    if as_json:
        print_json(summary)
        return
    console.print(f"{len(shape.schemas)} schema(s), {tables} table(s) and view(s), {len(shape.accounts)} account(s), "
                  f"{len(shape.roles)} role(s) from {shape.captured_from} in {shape.took_s:.1f}s; written: {', '.join(str(p) for p in written)}",
                  markup=False)
    if shape.paced:
        p = shape.paced
        console.print(f"paced: {p['reads']} read(s) one at a time, {p['busy_s']:.1f}s reading, {p['paused_s']:.1f}s "
                      f"paused (at most {p['share']:g} of the time)", markup=False)
    if shape.digest_source:
        console.print(f"query window: {shape.digest_source}; {shape.digest_classes} class(es) captured", markup=False)
    if not shape.sessions.get("available"):
        console.print(f"sessions: {shape.sessions.get('why')}", markup=False)
