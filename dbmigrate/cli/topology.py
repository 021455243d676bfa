"""`dbmigrate topology show`: discover a cluster and draw it as a tree."""

from __future__ import annotations

from pathlib import Path

import typer

from dbmigrate.exceptions import CommandFailed
from dbmigrate.cli.common import console, print_json
from dbmigrate.config import load_inventory
from dbmigrate.db import credentials as creds_mod
from dbmigrate.db.connection import Server
from dbmigrate.exceptions import UsageError
from dbmigrate.hostname import host_problem
from dbmigrate.topology.discovery import Cluster, discover, normalize_address, split_address
from dbmigrate.topology.find import discover_inventory
from dbmigrate.topology.render import cluster_tree

cmd = typer.Typer(help="Replication topology: discover and draw a cluster.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(cmd, name="topology")


def discover_from_args(inventory: Path | None, cluster: str | None, seed: str | None,
                       use_orchestrator: bool = True) -> Cluster:
    """Shared by topology/lag/check: an inventory cluster, or a crawl from a seed address."""
    if seed:
        host, port = split_address(seed)
        if host_problem(host):
            raise UsageError(f"--seed {seed}: the host {host_problem(host)}", hint="give an address such as 10.0.0.5:3306")
        if inventory:
            inv = load_inventory(inventory)
            try:
                _, spec = inv.find_server(f"{host}:{port}")
                credentials = inv.credentials_for(spec)
            except UsageError:  # a server the inventory does not list: its default credentials
                if inv.defaults.credentials is None:
                    raise UsageError(f"{seed} is not in {inventory} and it has no defaults.credentials",
                                     hint="add defaults.credentials to the inventory") from None
                credentials = inv.defaults.credentials.resolve(inv.base)
            timeouts = dict(connect_timeout=inv.defaults.connect_timeout, read_timeout=inv.defaults.read_timeout)
            names = {normalize_address(s.host, s.port): n for c in inv.clusters.values() for n, s in c.servers.items()}
        else:
            credentials = creds_mod.from_option_file(None)
            timeouts, names = {}, {}
        seed_server = Server(names.get(normalize_address(host, port), seed), host, port, credentials, **timeouts)
        return discover(seed_server, names=names, cluster_name=cluster)
    if not (inventory and cluster):
        raise UsageError("give --inventory FILE --cluster NAME, or --seed HOST:PORT",
                         hint="--seed crawls from any server; --inventory alone supplies credentials to it")
    return discover_inventory(load_inventory(inventory), cluster, use_orchestrator=use_orchestrator)


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
    with discover_from_args(inventory, cluster, seed, use_orchestrator=not no_orchestrator) as c:
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
    from dbmigrate.topology.wire import wire

    inv = load_inventory(inventory)
    root = creds_mod.from_environment("", root_password_env, user=root_user)
    said = wire(inv, cluster, root)
    for line in said:
        console.print(f"  {line}")
    console.print(f"[green]wired[/] cluster {cluster}: " + (f"{len(said)} change(s)" if said else "already in place"))
