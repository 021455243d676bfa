"""`dbmigrate consolidate plan`: measure the shards on the old servers and place them
on the target hosts (the run itself is `dbmigrate run playbooks/consolidate-shards.yaml`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from dbmigrate.cli.common import console, print_json
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
