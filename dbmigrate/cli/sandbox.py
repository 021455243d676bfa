"""`dbmigrate sandbox ...`: local topologies of real MariaDB processes."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from dbmigrate.console_table import Col, show, styled

from dbmigrate.cli.common import console, print_json
from dbmigrate.rehearsal.sandbox.manager import Sandboxes

cmd = typer.Typer(help="Local sandboxes of real MariaDB instances on 127.0.0.1.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(cmd, name="sandbox")


def sandbox_provisioner():
    """Who creates the instances a consolidation plan puts on a sandbox host: that sandbox
    (as `sandbox add-instance` does)."""
    from dbmigrate.rehearsal.provision import SandboxProvisioner

    return SandboxProvisioner()


def _progress(msg: str) -> None:
    console.print(f"[dim]… {msg}[/]")


@cmd.command("up")
def up(
    name: str = typer.Option("demo", "--name", help="Sandbox name (also the cluster name)."),
    replicas: int = typer.Option(2, "--replicas", help="Replicas of the primary."),
    dir: Optional[Path] = typer.Option(None, "--dir", help="Parent directory (default $DBMIGRATE_HOME/sandboxes)."),
    buffer_pool_mb: int = typer.Option(64, "--buffer-pool-mb"),
    haproxy: bool = typer.Option(False, "--haproxy", help="Start HAProxy in front (writer and reader ports)."),
    ssh: bool = typer.Option(False, "--ssh", help="Give every instance a host of its own behind a real sshd on "
                                                  "loopback; the inventory reaches its files only through ssh."),
    json_out: bool = typer.Option(False, "--json"),
):
    """Start 1 primary + K replicas with GTID replication, accounts and an inventory."""
    boxes = Sandboxes(progress=None if json_out else _progress)
    state = boxes.up(name, replicas, dir, buffer_pool_mb)
    if haproxy:
        from dbmigrate.rehearsal.sandbox import haproxy as hap

        hap.start(boxes, state.name)
        state = boxes.find(name)
    if ssh:
        from dbmigrate.rehearsal.sandbox import sshd

        try:
            sshd.start_for_sandbox(boxes, state.name)
        except BaseException:
            boxes.down(name)
            raise
        state = boxes.find(name)
    if json_out:
        print_json({"name": state.name, "dir": state.dir, "inventory": str(state.inventory_file),
                    "timings": state.timings, "instances": boxes.status(name), "haproxy": state.haproxy,
                    "ssh": state.ssh})
        return
    _show(boxes, name)
    console.print(f"[green]up and replicating in {state.timings['total_s']:.2f}s[/] "
                  f"(datadirs and processes {state.timings['start_s']:.2f}s)")
    console.print(f"inventory: {state.inventory_file}")
    console.print(f"next: dbmigrate inventory check {state.inventory_file}")


@cmd.command("add-instance")
def add_instance(
    sandbox: str = typer.Argument(..., help="Sandbox name."),
    instance: Optional[str] = typer.Option(None, "--instance", help="Instance name (default NAME-N)."),
    replica_of: Optional[str] = typer.Option(None, "--replica-of", help="Replicate from this instance."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Cluster in the inventory."),
    buffer_pool_mb: int = typer.Option(64, "--buffer-pool-mb"),
):
    """Add one more instance, standalone or as a replica (e.g. "new hardware")."""
    boxes = Sandboxes(progress=_progress)
    ist = boxes.add_instance(sandbox, instance, replica_of, buffer_pool_mb, cluster)
    console.print(f"[green]added {ist.name}[/] on 127.0.0.1:{ist.port} "
                  f"({'replica of ' + ist.replica_of if ist.replica_of else 'standalone'})")


@cmd.command("status")
def status(name: str = typer.Argument("demo"), json_out: bool = typer.Option(False, "--json")):
    """Instances of a sandbox: port, pid, running."""
    boxes = Sandboxes()
    if json_out:
        print_json(boxes.status(name))
        return
    _show(boxes, name)


def _show(boxes: Sandboxes, name: str) -> None:
    cols = [Col("instance", keep=True), Col("address", keep=True), Col("id", keep=True, right=True),
            Col("cluster", keep=True), Col("created as", keep=True), Col("pid", keep=True, right=True),
            Col("state", keep=True)]
    rows = [[s["name"], f"127.0.0.1:{s['port']}", s["server_id"], s["cluster"], s["role"], s["pid"] or "-",
             styled("running", "green") if s["running"] else styled("stopped", "red")] for s in boxes.status(name)]
    show(console, cols, rows, title=f"sandbox {name}")
    line = haproxy_line(boxes.find(name).haproxy)
    if line:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def haproxy_line(h: dict | None) -> str:
    """Where applications connect when the sandbox has HAProxy in front: its ports, whole."""
    if not h:
        return ""
    from dbmigrate.rehearsal.sandbox.instance import pid_alive

    state = "running" if h.get("pid") and pid_alive(h["pid"]) else "stopped"
    return (f"HAProxy ({state}, pid {h.get('pid') or '-'}): writer 127.0.0.1:{h['writer_port']}, "
            f"readers 127.0.0.1:{h['reader_port']}, admin socket {h['admin_socket']}")


@cmd.command("ls")
def ls(json_out: bool = typer.Option(False, "--json")):
    """All sandboxes known here."""
    boxes = Sandboxes()
    items = [{"name": s.name, "dir": s.dir, "instances": len(s.instances),
              "running": sum(1 for x in boxes.status(s.name) if x["running"])} for s in boxes.list()]
    if json_out:
        print_json(items)
        return
    show(console, [Col("name", keep=True), Col("instances", keep=True, right=True),
                   Col("running", keep=True, right=True), Col("dir", keep=True)],
         [[i["name"], i["instances"], i["running"], i["dir"]] for i in items], title="sandboxes")


@cmd.command("down")
def down(name: str = typer.Argument(...), keep_data: bool = typer.Option(False, "--keep-data")):
    """Stop the sandbox's own processes (by pid) and remove its files unless --keep-data."""
    stopped = Sandboxes().down(name, keep_data)
    console.print(f"stopped {', '.join(stopped) or 'nothing (already stopped)'}; "
                  f"{'data kept' if keep_data else 'files removed'}")
