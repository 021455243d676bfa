"""`dbmigrate consolidate plan | run | throttle | rollback`: measure and place the shards,
run the consolidation playbook with the fleet's and the copy's settings from the command
line, change a live run's copy pace, and put one old server back."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from rich.markup import escape

from dbmigrate.exceptions import CommandFailed
from dbmigrate.app.errors import run_failed
from dbmigrate.console_table import Col, show
from dbmigrate.cli.common import console, err_console, guarded, print_json
from dbmigrate.exceptions import UsageError

GB = 1024 ** 3


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Consolidate logical shards (schemas) onto multi-instance hosts.", no_args_is_help=True)
    app.add_typer(group, name="consolidate")

    @group.command("plan")
    def plan_cmd(
        inventory: Optional[Path] = typer.Option(None, "--inventory", help="inventory whose servers list their "
                                                 "`shards:` (measured live unless --sizes is given)"),
        sizes: Optional[Path] = typer.Option(None, "--sizes", help="YAML or CSV of measured sizes per shard: server, "
                                             "shard, bytes, working_set, qps (nothing is measured)"),
        hosts: Optional[Path] = typer.Option(None, "--hosts", help="YAML file with `hosts:` (and `planning:`)"),
        from_inventory: bool = typer.Option(False, "--from-inventory", help="use the inventory's `hosts:` section"),
        strategy: str = typer.Option("instance-per-group", "--strategy", help="instance-per-group or merge"),
        instances_per_host: Optional[int] = typer.Option(None, "--instances-per-host", help="instances on every "
                                                         "host (merge: the target; both: the cap)"),
        what_if: Optional[str] = typer.Option(None, "--what-if", help="instances per host to compare, e.g. 3-8: "
                                              "hosts needed and per-host CPU, memory, disk, buffer pool"),
        model_host: Optional[str] = typer.Option(None, "--model-host", help="host whose hardware the what-if "
                                                 "table assumes (default: the first by name)"),
        sample_s: float = typer.Option(5.0, "--sample-s", help="query-rate sampling window per old server (s)"),
        parallel: int = typer.Option(8, "--parallel", help="old servers measured at the same time"),
        headroom_pct: Optional[float] = typer.Option(None, "--headroom-pct", help="override planning.headroom_pct"),
        out: Optional[Path] = typer.Option(None, "--out", help="write the plan (JSON) for provisioning and the "
                                           "consolidate playbook"),
        as_json: bool = typer.Option(False, "--json", help="print the plan as JSON"),
    ) -> None:
        """Measure shards (or read their sizes) and place them on the target hosts, evenly."""
        from dbmigrate.app.consolidate.plan import PlanRequest, make_plan

        result = make_plan(PlanRequest(inventory=inventory, sizes=sizes, hosts=hosts, from_inventory=from_inventory,
                                       strategy=strategy, instances_per_host=instances_per_host, what_if=what_if,
                                       model_host=model_host, sample_s=sample_s, parallel=parallel,
                                       headroom_pct=headroom_pct, out=out),
                           log=lambda m: err_console.print(escape(m)))
        doc = result.to_dict()
        if as_json:
            print_json(doc)
            return
        render(doc)
        if out:
            console.print(f"plan written to {out}")


    @group.command("provision")
    def provision_cmd(
        plan_file: Path = typer.Option(..., "--plan", help="plan written by `consolidate plan --out`"),
        inventory: Path = typer.Option(..., "--inventory", help="inventory: the accounts the instances get "
                                       "(defaults.credentials, the cluster's replication_credentials) and how "
                                       "each host is reached (hosts: NAME: access:, host_access:)"),
        cluster: Optional[str] = typer.Option(None, "--cluster", help="cluster of the old servers (default: the "
                                              "one holding the plan's old servers)"),
        out_dir: Optional[Path] = typer.Option(None, "--out-dir", help="where the inventory and playbook are "
                                               "written (default: PLAN-provision beside the plan)"),
        start: Optional[str] = typer.Option(None, "--start", help="systemd (mariadb@NAME units) or direct "
                                            "(mariadbd started by the playbook, where no systemd runs); default: "
                                            "systemd, direct for this machine when it runs no systemd"),
        conf_dir: str = typer.Option("/etc/mysql/mariadb.conf.d", "--conf-dir", help="where each instance's "
                                     "option group file goes"),
        mariadbd_user: str = typer.Option("mysql", "--mariadbd-user", help="system user that owns the datadirs "
                                          "and runs mariadbd"),
        packages: bool = typer.Option(True, "--packages/--no-packages", help="install mariadb-server with apt"),
        dry_run: bool = typer.Option(False, "--dry-run", help="show the generated files; run nothing"),
        as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
    ) -> None:
        """Create and start the plan's instances on their hosts with ansible-playbook, then check each answers."""
        from dbmigrate.app.consolidate.provision import ProvisionRequest, provision

        result = provision(ProvisionRequest(plan=plan_file, inventory=inventory, cluster=cluster, out_dir=out_dir,
                                            start=start, conf_dir=conf_dir, mariadbd_user=mariadbd_user,
                                            install_packages=packages, dry_run=dry_run),
                           log=lambda m: err_console.print(escape(m)) if not as_json else None,
                           progress=(lambda m: err_console.print(f"[dim]… {escape(m)}[/]")) if as_json else None)
        if as_json:
            print_json(result.to_dict())
            return
        if dry_run:
            for name, text in result.files.items():
                console.rule(f"{result.out_dir / name}")
                console.print(escape(text), end="", soft_wrap=True)
            console.print("dry run: nothing written, nothing run")
            return
        t = Table(title=f"instances provisioned (files in {result.out_dir})")
        for c in ("instance", "host", "address", "server_id", "read_only"):
            t.add_column(c)
        for i in result.instances:
            t.add_row(i["name"], i["host"], i["address"], str(i["server_id"]), "ON" if i.get("read_only") else "OFF")
        console.print(t)
        recap = result.recap.hosts if result.recap else {}
        console.print(f"ansible: {sum(c.get('changed', 0) for c in recap.values())} change(s) on {len(recap)} "
                      f"host(s); every instance answers at its planned port")


    @group.command("status")
    def status_cmd(
        plan_file: Path = typer.Option(..., "--plan", help="plan written by `consolidate plan --out`"),
        inventory: Path = typer.Option(..., "--inventory", help="inventory with the old servers and credentials"),
        routes: Optional[Path] = typer.Option(None, "--routes", help="DSN file with one entry per shard "
                                              "(default: the cluster's dsn-file router); a shard with a relay "
                                              "in the cluster's shard_routers is read on its relay instead"),
        cluster: Optional[str] = typer.Option(None, "--cluster", help="cluster whose dsn-file router to read"),
        as_json: bool = typer.Option(False, "--json", help="print the status as JSON"),
    ) -> None:
        """Per shard: served by its old server or its new instance (where its relay or the DSN file sends its
        writes), and how far the move is. Exit 1 on a problem."""
        from dbmigrate.app.consolidate.status import consolidation_status

        result = consolidation_status(plan_file, inventory, routes, cluster)
        if as_json:
            print_json(result.to_dict())
        else:
            dsn = str(result.routes or "none: served by = the only writable side")
            where = (f"{len(result.relays)} shard(s) through their relays, the others {dsn}" if result.relays
                     else dsn)
            t = Table(title=f"shards (routes: {where})")
            for c in ("shard", "old server", "instance", "served by", "stage", "problems"):
                t.add_column(c)
            for sh in result.shards:
                t.add_row(sh.shard, sh.old, sh.instance, sh.served_by, sh.stage,
                          escape("; ".join(sh.problems)) if sh.problems else "")
            console.print(t)
            moved = sum(1 for sh in result.shards if sh.served_by == "new instance")
            console.print(f"{moved} of {len(result.shards)} shard(s) served by their new instance; "
                          f"{len(result.problems)} problem(s)")
        if result.problems:
            raise CommandFailed(1, f"{len(result.problems)} problem(s): " + "; ".join(map(str, result.problems)),
                                hint="fix each problem, then: dbmigrate consolidate status again")

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
            raise run_failed(outcome)

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
        from dbmigrate.app.consolidate.control import set_throttle

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
        from dbmigrate.app.consolidate.control import rollback_server

        if not yes and not typer.confirm(f"Route {server}'s shards back to it (after it applied their writes)?"):
            raise CommandFailed(1, f"not confirmed: {server}'s shards were not routed back",
                                hint="nothing changed; run again and confirm, or pass --yes")
        console.print(rollback_server(run, server), markup=False)


def _gb(v: float) -> str:
    """GB figures, in MB below 1 GB (rehearsal shards would all read 0.00)."""
    return f"{v * 1024:.1f} MB" if abs(v) < 1 else f"{v:.2f} GB"


SHARD_ROWS = 60  # above this many shards, one line per old server instead of one per shard


def planned_memory(doc: dict) -> tuple[dict[str, float], dict[str, float]]:
    """GB each instance will take once started (its buffer pool as planned plus the per-instance
    overhead, or its demand when that is larger), and their sum per host: the figures the tables show
    side by side must be the same memory (a pool of 33 GB beside an instance of 989 MB was not)."""
    overhead_gb = doc["settings"].get("instance_overhead_mb", 0) / 1024
    per_instance = {i["name"]: max(i["demand"]["memory"], i["buffer_pool_mb"] / 1024 + overhead_gb)
                    for i in doc["instances"]}
    per_host = {h["name"]: sum(per_instance.get(n, 0.0) for n in h["instances"]) for h in doc["hosts"]}
    return per_instance, per_host


def render(doc: dict) -> None:
    s = doc["settings"]
    memory, host_memory = planned_memory(doc)
    if len(doc["shards"]) <= SHARD_ROWS:
        render_shards(doc)
    else:
        render_sources(doc)
    # ids, addresses and figures are what people copy: kept whole (records when they do not fit)
    rows = []
    for i in doc["instances"]:
        d = i["demand"]
        shards = ", ".join(i["shards"]) if len(i["shards"]) <= 6 else f"{len(i['shards'])} shards"
        sources = ", ".join(i["sources"]) if len(i["sources"]) <= 3 else f"{len(i['sources'])} servers"
        rows.append([i["name"], i["host"], f"{i['address']}:{i['port']}", str(i.get("server_id") or "-"), shards,
                     sources, _gb(d["disk"]), _gb(i.get("working_set_gb", d["memory"])), _gb(memory[i["name"]]),
                     f"{d['cpu']:.2f}", str(i["buffer_pool_mb"])])
    show(console, [Col("instance", keep=True), Col("host", keep=True), Col("address", keep=True),
                   Col("server_id", keep=True, right=True), Col("shards"), Col("sources"),
                   Col("disk", keep=True, right=True), Col("working set", keep=True, right=True),
                   Col("memory (pool + overhead)", keep=True, right=True),
                   Col("cpu cores", keep=True, right=True), Col("buffer pool MB", keep=True, right=True)],
         rows, title=f"instances (strategy {doc['strategy']})")
    rows = []
    for h in doc["hosts"]:
        cells = [" / ".join(_gb(h[k]["disk"]) for k in ("used", "usable", "capacity")),
                 " / ".join(_gb(v) for v in (host_memory[h["name"]], h["usable"]["memory"], h["capacity"]["memory"]))]
        cells.append(" / ".join(f"{h[k]['cpu']:.2f}" for k in ("used", "usable", "capacity")))
        rows.append([h["name"], f"{len(h['instances'])} of {h['max_instances']}", *cells])
    show(console, [Col("host", keep=True), Col("instances", keep=True), Col("disk used/usable/total", keep=True),
                   Col("memory used/usable/total", keep=True), Col("cpu cores used/usable/total", keep=True)],
         rows, title=f"hosts (headroom {s['headroom_pct']:g}%, {s['reserved_memory_gb']:g} GB memory reserved)")
    counts = [len(h["instances"]) for h in doc["hosts"]]
    console.print(f"{len(doc['instances'])} instance(s) on {sum(1 for c in counts if c)} of {len(counts)} host(s), "
                  f"{min(counts)}-{max(counts)} per host")
    for w in doc.get("warnings", []):
        console.print(f"[yellow]warning:[/] {escape(w)}")
    if doc.get("what_if"):
        render_what_if(doc["what_if"], doc["strategy"])


def render_shards(doc: dict) -> None:
    s = doc["settings"]
    rows = [[sh["name"], sh["source"], _gb(sh["size_bytes"] / GB), _gb(sh["size_bytes"] * (1 + s["growth_pct"] / 100) / GB),
             _gb(sh["working_set_bytes"] / GB), f"{sh['qps']:.1f}", f"{sh['qps'] / s['qps_per_core']:.2f}",
             "; ".join(f"{k}: {v}" for k, v in sh["estimates"].items() if k != "size")] for sh in doc["shards"]]
    show(console, [Col("shard", keep=True), Col("old server", keep=True), Col("size", keep=True, right=True),
                   Col("disk", keep=True, right=True), Col("working set", keep=True, right=True),
                   Col("qps", keep=True, right=True), Col("cpu cores", keep=True, right=True), Col("estimates")],
         rows, title=f"shards (growth {s['growth_pct']:g}%, {s['qps_per_core']:g} qps per core)")


def render_sources(doc: dict) -> None:
    """A big fleet: totals, and the biggest old servers."""
    by: dict[str, list[dict]] = {}
    for sh in doc["shards"]:
        by.setdefault(sh["source"], []).append(sh)
    size = sum(sh["size_bytes"] for sh in doc["shards"]) / GB
    ws = sum(sh["working_set_bytes"] for sh in doc["shards"]) / GB
    qps = sum(sh["qps"] for sh in doc["shards"])
    console.print(f"{len(doc['shards'])} shards on {len(by)} old servers: {_gb(size)} of data, {_gb(ws)} working "
                  f"set, {qps:,.0f} queries/s")


def _short_gb(v: float) -> str:
    return f"{v:.0f}G" if v >= 10 else (f"{v:.1f}G" if v >= 1 else f"{v * 1024:.0f}M")


def render_what_if(what: dict, strategy: str) -> None:
    t = Table(title=f"what if: instances per host on hosts like {what['model_host']} (strategy {strategy})")
    console.print("cpu, memory, disk: the busiest host's demand and its share of the host; pool: buffer pool "
                  "per instance, smallest-largest")
    notes = any(r["note"] or r["empty_hosts"] for r in what["rows"])
    for c in ("per host", "hosts", "inst", "bound by", "cpu", "memory", "disk", "pool") + (("note",) if notes else ()):
        t.add_column(c, justify="left" if c in ("bound by", "note") else "right")
    for r in what["rows"]:
        if r["hosts"] is None:
            t.add_row(str(r["instances_per_host"]), "-", "-", r["bound_by"], "", "", "", "", r["note"])
            continue
        m, pct = r["max_per_host"], r["max_per_host_pct"]
        lo, hi = (_short_gb(mb / 1024) for mb in r["buffer_pool_mb"])
        note = r["note"] or (f"{r['empty_hosts']} host(s) empty" if r["empty_hosts"] else "")
        t.add_row(str(r["instances_per_host"]), str(r["hosts"]), str(r["instances"]), r["bound_by"],
                  f"{m['cpu']:.1f} {pct['cpu']:.0f}%", f"{_short_gb(m['memory'])} {pct['memory']:.0f}%",
                  f"{_short_gb(m['disk'])} {pct['disk']:.0f}%", lo if lo == hi else f"{lo}-{hi}",
                  *((note,) if notes else ()))
    console.print(t)
