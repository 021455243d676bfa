"""`dbmigrate topology show`: discover a cluster and draw it as a tree."""

from __future__ import annotations

from pathlib import Path

import typer

from dbmigrate.app.topology import cluster_tree, discover_cluster, wire_cluster
from dbmigrate.exceptions import CommandFailed
from dbmigrate.cli.common import console, print_json

cmd = typer.Typer(help="Replication topology: discover and draw a cluster.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(cmd, name="topology")


@cmd.command("show")
def show(inventory: Path = typer.Option(None, "--inventory", "-i", help="Inventory YAML."),
         cluster: str = typer.Option(None, "--cluster", "-c", help="Cluster name in the inventory."),
         seed: str = typer.Option(None, "--seed", help="Crawl from this HOST:PORT (credentials from --inventory "
                                  "defaults, else ~/.my.cnf)."),
         no_orchestrator: bool = typer.Option(False, "--no-orchestrator",
                                              help="Probe the servers even when the inventory names orchestrator."),
         json_out: bool = typer.Option(False, "--json", help="Print the cluster model as JSON.")):
    """Discover the primary and every replica; draw role, lag, version, rw/ro, GTID, binlog format and problems.

    Exits 1 when a problem was found, so that scripts can use it as a check.
    """
    with discover_cluster(inventory, cluster, seed, use_orchestrator=not no_orchestrator) as c:
        if json_out:
            print_json(c.to_dict())
        else:
            console.print(cluster_tree(c))
    if c.problems:
        raise CommandFailed(1, f"{len(c.problems)} problem(s): " + "; ".join(map(str, c.problems)),
                            hint="see the tree above")


@cmd.command("wire")
def wire_command(inventory: Path = typer.Option(..., "--inventory", "-i", help="Inventory YAML."),
                 cluster: str = typer.Option(..., "--cluster", "-c", help="Cluster name in the inventory."),
                 root_user: str = typer.Option("root", "--root-user", help="A user that may create accounts."),
                 root_password_env: str = typer.Option("DBMIGRATE_ROOT_PASSWORD", "--root-password-env",
                                                       help="Environment variable holding its password.")):
    """Wire fresh servers (e.g. docker compose): accounts from the inventory's credentials and GTID replication
    from the server marked `role: primary`."""
    said = wire_cluster(inventory, cluster, root_user, root_password_env)
    for line in said:
        console.print(f"  {line}")
    console.print(f"[green]wired[/] cluster {cluster}: " + (f"{len(said)} change(s)" if said else "already in place"))
