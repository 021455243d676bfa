"""`dbmigrate checksum`: pt-table-checksum on the primary, differences per replica."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from dbmigrate.exceptions import CommandFailed
from dbmigrate.console_table import Col, show, styled

from dbmigrate.cli.common import console, print_json


def register(app: typer.Typer) -> None:
    app.command("checksum")(checksum)


def checksum(inventory: Path = typer.Option(..., "--inventory", "-i", help="Inventory YAML."),
             cluster: str = typer.Option(..., "--cluster", "-c", help="Cluster name."),
             databases: str = typer.Option(..., "--databases", "-d", help="Comma-separated databases to checksum."),
             json_out: bool = typer.Option(False, "--json")):
    """Compare every replica's data with the primary's (pt-table-checksum); exit 1 when any differ."""
    from dbmigrate.app.checksum import checksum_cluster

    outcome = checksum_cluster(inventory, cluster, [d.strip() for d in databases.split(",") if d.strip()])
    primary, replicas, report = outcome.primary, outcome.replicas, outcome.report
    if json_out:
        print_json({"primary": primary, **report.to_dict()})
    else:
        colours = {"same": "green", "differs": "red", "not compared": "red"}
        show(console, [Col("replica", keep=True), Col("verdict", keep=True), Col("differing tables")],
             [[name, styled(report.verdict(name), colours[report.verdict(name)]),
               ", ".join(f"{d['table']} ({d['chunks']} chunk(s))" for d in report.diffs.get(name, [])) or "-"]
              for name in replicas], title=f"pt-table-checksum of {databases} against {primary}")
        for e in report.errors:
            console.print(f"[red]{escape(e)}[/]")
    if not report.ok:
        bad = [name for name in report.diffs] + list(report.errors)
        raise CommandFailed(1, "pt-table-checksum found differences or errors: " + "; ".join(map(str, bad)),
                            hint="see the table above; resync the differing tables before any cutover")
