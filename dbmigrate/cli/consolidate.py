"""`dbmigrate consolidate plan | run | throttle | rollback`: measure and place the shards,
run the consolidation playbook with the fleet's and the copy's settings from the command
line, change a live run's copy pace, and put one old server back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from dbmigrate.cli.common import console, guarded, print_json
from dbmigrate.exceptions import UsageError

GB = 1024 ** 3


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Consolidate logical shards (schemas) onto multi-instance hosts.", no_args_is_help=True)
    app.add_typer(group, name="consolidate")

    @group.command("plan")
    def plan_cmd(
        inventory: Path = typer.Option(..., "--inventory", help="inventory whose servers list their `shards:`"),
        hosts: Optional[Path] = typer.Option(None, "--hosts", help="YAML file with `hosts:` (and `planning:`)"),
        from_inventory: bool = typer.Option(False, "--from-inventory", help="use the inventory's `hosts:` section"),
        strategy: str = typer.Option("instance-per-group", "--strategy", help="instance-per-group or merge"),
        sample_s: float = typer.Option(5.0, "--sample-s", help="query-rate sampling window per old server (s)"),
        headroom_pct: Optional[float] = typer.Option(None, "--headroom-pct", help="override planning.headroom_pct"),
        out: Optional[Path] = typer.Option(None, "--out", help="write the plan (JSON) for the consolidate playbook"),
        as_json: bool = typer.Option(False, "--json", help="print the plan as JSON"),
    ) -> None:
        """Measure shards (size, working set, query rate) and bin-pack them onto the target hosts."""
        from dbmigrate.config import load_hosts, load_inventory
        from dbmigrate.procedures.consolidate.plan import measure_shards, plan

        if bool(hosts) == from_inventory:
            raise UsageError("give exactly one of --hosts FILE and --from-inventory",
                             hint="target hosts: cores, memory_gb, disk_gb, max_instances per host")
        inv = load_inventory(inventory)
        if hosts:
            hf = load_hosts(hosts)
            host_specs, settings = hf.hosts, hf.planning
        else:
            if not inv.hosts:
                raise UsageError(f"{inventory} has no `hosts:` section", hint="add one, or pass --hosts FILE")
            host_specs, settings = inv.hosts, inv.planning
        if headroom_pct is not None:
            settings = settings.model_copy(update={"headroom_pct": headroom_pct})
        shards = measure_shards(inv, sample_s=sample_s, working_set_fraction=settings.working_set_fraction)
        result = plan(shards, host_specs, settings, strategy)
        doc = result.to_dict()
        if out:
            out.write_text(json.dumps(doc, indent=2) + "\n")
        if as_json:
            print_json(doc)
            return
        render(doc)
        if out:
            console.print(f"plan written to {out}")


    @group.command("run")
    @guarded
    def run_cmd(
        playbook: Path = typer.Argument(..., help="a consolidate playbook"),
        throttle: Optional[float] = typer.Option(None, "--throttle", help="cap each copy at this many MB/s "
                                                 "(0: no cap; overrides seed.throttle_mb_s)"),
        concurrency: Optional[int] = typer.Option(None, "--concurrency", help="old servers at a time "
                                                  "(overrides fleet.concurrency)"),
        seed_method: Optional[str] = typer.Option(None, "--seed-method", help="auto, physical or logical"),
        yes: bool = typer.Option(False, "--yes", "-y", help="approve manual gates"),
        dry_run: bool = typer.Option(False, "--dry-run", help="read, check and describe; change nothing"),
        json_lines: bool = typer.Option(False, "--json", help="one JSON object per event"),
    ) -> None:
        """Run a consolidation playbook; the options override its seed/fleet settings for this run."""
        import sys

        from rich.console import Console

        from dbmigrate.app.runs import start_run
        from dbmigrate.cli.render import ConsoleRenderer, JsonLinesRenderer, console_approver

        update: dict = {}
        if throttle is not None:
            if throttle < 0:
                raise UsageError(f"--throttle must be 0 or more MB/s, not {throttle:g}")
            update.setdefault("seed", {})["throttle_mb_s"] = throttle
        if seed_method is not None:
            if seed_method not in ("auto", "physical", "logical"):
                raise UsageError(f"--seed-method {seed_method}: use auto, physical or logical")
            update.setdefault("seed", {})["method"] = seed_method
        if concurrency is not None:
            if not 1 <= concurrency <= 64:
                raise UsageError(f"--concurrency must be between 1 and 64, not {concurrency}")
            update["fleet"] = {"concurrency": concurrency}
        subscriber = JsonLinesRenderer(sys.stdout) if json_lines else ConsoleRenderer(Console(highlight=False,
                                                                                               soft_wrap=True))
        outcome = start_run(playbook, params_update=update, subscribers=[subscriber], approver=console_approver(),
                            assume_yes=yes, dry_run=dry_run)
        if not outcome.ok:
            if outcome.error is not None and outcome.error.hint:
                console.print(f"hint: {outcome.error.hint}", markup=False)
            raise typer.Exit(1)

    @group.command("throttle")
    @guarded
    def throttle_cmd(
        run: str = typer.Argument(..., help="run id (a unique prefix or 'last')"),
        mb_s: Optional[float] = typer.Option(None, "--mb-s", help="new cap in MB/s for every copy (0: no cap)"),
        pause: bool = typer.Option(False, "--pause", help="hold every copy of the run"),
        resume: bool = typer.Option(False, "--resume", help="let held copies go on"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Change the pace of a live run's copies (they read it within a second)."""
        from dbmigrate.app.consolidate import set_throttle

        if pause and resume:
            raise UsageError("give --pause or --resume, not both")
        out = set_throttle(run, mb_s=mb_s, pause=True if pause else False if resume else None)
        if as_json:
            print_json(out)
            return
        cap = "no cap" if not out["throttle_mb_s"] else f"{out['throttle_mb_s']:g} MB/s"
        console.print(f"run {out['run_id']}: copies {'held' if out['paused'] else 'running'}, {cap}")

    @group.command("rollback")
    @guarded
    def rollback_cmd(
        run: str = typer.Argument(..., help="run id (a unique prefix or 'last')"),
        server: str = typer.Option(..., "--server", help="the old server to put back"),
        yes: bool = typer.Option(False, "--yes", "-y", help="do not ask"),
    ) -> None:
        """Put one old server back (its shards route to it again); the others stay moved."""
        from dbmigrate.app.consolidate import rollback_server

        if not yes and not typer.confirm(f"Route {server}'s shards back to it (after it applied their writes)?"):
            raise typer.Exit(1)
        console.print(rollback_server(run, server), markup=False)


def _gb(v: float) -> str:
    """GB figures, in MB below 1 GB (rehearsal shards would all read 0.00)."""
    return f"{v * 1024:.1f} MB" if abs(v) < 1 else f"{v:.2f} GB"


def render(doc: dict) -> None:
    s = doc["settings"]
    t = Table(title=f"shards (growth {s['growth_pct']:g}%, {s['qps_per_core']:g} qps per core)")
    for c in ("shard", "old server", "size", "disk", "working set", "qps", "cpu cores", "estimates"):
        t.add_column(c, justify="left" if c in ("shard", "old server", "estimates") else "right")
    for sh in doc["shards"]:
        t.add_row(sh["name"], sh["source"], _gb(sh["size_bytes"] / GB), _gb(sh["size_bytes"] * (1 + s["growth_pct"] / 100) / GB),
                  _gb(sh["working_set_bytes"] / GB), f"{sh['qps']:.1f}", f"{sh['qps'] / s['qps_per_core']:.2f}",
                  "; ".join(f"{k}: {v}" for k, v in sh["estimates"].items() if k != "size"))
    console.print(t)
    t = Table(title=f"instances (strategy {doc['strategy']})")
    for c in ("instance", "host", "address", "shards", "sources", "disk", "memory", "cpu cores", "buffer pool MB"):
        t.add_column(c, justify="right" if c in ("disk", "memory", "cpu cores", "buffer pool MB") else "left")
    for i in doc["instances"]:
        d = i["demand"]
        t.add_row(i["name"], i["host"], f"{i['address']}:{i['port']}", ", ".join(i["shards"]), ", ".join(i["sources"]),
                  _gb(d["disk"]), _gb(d["memory"]), f"{d['cpu']:.2f}", str(i["buffer_pool_mb"]))
    console.print(t)
    t = Table(title=f"hosts (headroom {s['headroom_pct']:g}%, {s['reserved_memory_gb']:g} GB memory reserved)")
    for c in ("host", "instances", "disk used/usable/total", "memory used/usable/total", "cpu cores used/usable/total"):
        t.add_column(c, justify="left" if c in ("host", "instances") else "right")
    for h in doc["hosts"]:
        cells = [" / ".join(_gb(h[k][r]) for k in ("used", "usable", "capacity")) for r in ("disk", "memory")]
        cells.append(" / ".join(f"{h[k]['cpu']:.2f}" for k in ("used", "usable", "capacity")))
        t.add_row(h["name"], f"{len(h['instances'])} of {h['max_instances']}", *cells)
    console.print(t)
