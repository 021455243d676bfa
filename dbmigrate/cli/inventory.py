"""`dbmigrate inventory check FILE`: connect to every server and show what it is."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.text import Text

from dbmigrate.exceptions import CommandFailed
from dbmigrate.console_table import Col, show, styled

from dbmigrate.cli.common import console, err_console, print_json
from dbmigrate.app.inventory import check_inventory, validate_inventory

cmd = typer.Typer(help="Inventory files: validate and check against the servers.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(cmd, name="inventory")


@cmd.command("check")
def check(file: Path = typer.Argument(..., help="Inventory YAML."),
          cluster: str = typer.Option(None, "--cluster", help="Only this cluster."),
          json_out: bool = typer.Option(False, "--json")):
    """Connect to every server: flavor, version, role, read_only, GTID, replication and lag."""
    rows = check_inventory(file, cluster)
    failed = [f for _, f in rows if f.error]
    if json_out:
        servers = []
        for cname, f in rows:
            d = f.to_dict()
            d["cluster"] = cname
            d["behind"] = f.__dict__.get("behind", {})
            d["lag_transactions"] = sum(d["behind"].values()) if d["behind"] else (0 if f.is_replica else None)
            d["missing_privileges"] = f.__dict__.get("missing_privileges", {})
            servers.append(d)
        print_json({"inventory": str(file), "ok": not failed, "servers": servers})
    else:
        cols = [Col("server", keep=True), Col("cluster", keep=True), Col("address", keep=True), Col("flavor"),
                Col("version", keep=True), Col("role"), Col("read_only", keep=True), Col("gtid", keep=True),
                Col("replication"), Col("lag", keep=True)]
        table = []
        for cname, f in rows:
            if f.error:
                table.append([f.name, cname, f.address, "-", "-", styled("unreachable", "red"), "-", "-", "-", "-"])
                continue
            repl: object = "-"
            lag = "-"
            if f.is_replica:
                ok = f.io_running == "Yes" and f.sql_running == "Yes"
                repl = Text.assemble(styled(f"io={f.io_running} sql={f.sql_running}", "green" if ok else "red"),
                                     f" from {f.source}")
                behind = f.__dict__.get("behind", {})
                lag = f"{sum(behind.values())} trx, SBM {f.seconds_behind if f.seconds_behind is not None else 'NULL'}"
            table.append([f.name, cname, f.address, f.flavor, f.version.split("-")[0], f.role,
                          "ON" if f.read_only else "OFF", f.gtid_executed or "-", repl, lag])
        show(console, cols, table, title=f"inventory {file}")
    if not json_out:
        for line in privilege_lines(rows):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    for f in failed:
        err_console.print(f"[bold red]error:[/] {escape(f.name)}: {escape(f.error)}", highlight=False, soft_wrap=True)
    if failed:
        raise CommandFailed(1, f"{len(failed)} server(s) failed: " + "; ".join(f"{f.name}: {f.error}" for f in failed),
                            hint="fix each server named above, then check again")


@cmd.command("validate")
def validate(file: Path = typer.Argument(...)):
    """Validate the file only (no connections)."""
    clusters, servers = validate_inventory(file)
    console.print(f"[green]ok[/]: {clusters} cluster(s), {servers} server(s)")


def privilege_lines(rows) -> list[str]:
    """One line per server whose accounts lack one of the least privileges (docs/operations/privileges.md)."""
    out = []
    for _, f in rows:
        missing = f.__dict__.get("missing_privileges") or {}
        said = [f"{account} account lacks {', '.join(privs)}" for account, privs in missing.items() if privs]
        if said:
            out.append(f"privileges: {f.name}: " + "; ".join(said) + " (see docs/operations/privileges.md)")
    if not out and any(f.__dict__.get("missing_privileges") for _, f in rows):
        out.append("privileges: the admin and replication accounts hold every privilege the tool needs")
    return out
