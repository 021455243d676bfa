"""`dbmigrate rehearse ...`: run a procedure end to end on a throwaway local sandbox."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

import typer
from rich.markup import escape
from rich.table import Table

from dbmigrate.exceptions import CommandFailed
from dbmigrate.cli.common import console, err_console, print_json

cmd = typer.Typer(help="Rehearse procedures on a throwaway local sandbox of real servers, under load.",
                  no_args_is_help=True)


COMPOSE_HELP = ("Run against the containers of docker-compose.yml instead of local processes: every server a "
                "container with its own filesystem on a loopback address of its own, its files reached only "
                "through `docker exec`. Uses a running Docker Engine, else starts one of its own and stops it "
                "afterwards; images are built from Debian's packages when missing (cached).")


SHAPE_HELP = ("A directory written by `dbmigrate shape capture`: the sandbox gets its schema, rows generated from "
              "its column statistics, its accounts and grants (generated passwords in a private option file), and "
              "its query classes are replayed at their rates through a pooled client (lazy reconnects, "
              "connections kept after errors, its own session settings, server-side prepared statements); "
              "the report gives each class's count, p50, p99 and errors before and after.")


TUI_HELP = ("Drive the run from the terminal session (as `dbmigrate tui`): its board, y/n at the gates, q to close "
            "it once the run has ended; the sandbox, the load, the verifier and the report stay the rehearsal's "
            "(printed after the session closes). Needs a terminal.")


def session_driver(tui: bool):
    """The terminal session as the rehearsal's driver (checked before anything is built), or None."""
    if not tui:
        return None
    from dbmigrate.cli.tui import rehearsal_session

    return rehearsal_session()


def register(app: typer.Typer) -> None:
    app.add_typer(cmd, name="rehearse")


GONE = "the rehearsal removed its topology: nothing is left to roll back or resume"


def renderers(json_out: bool, keep: bool) -> list:
    """The run's console lines; without --keep an interrupted run's "undo with: dbmigrate rollback RUN"
    would name a topology the rehearsal is about to remove, so it says that instead."""
    if json_out:
        return []
    from dataclasses import replace

    from dbmigrate.cli.render import ConsoleRenderer
    from dbmigrate.engine.events import RunFinished

    shown = ConsoleRenderer(console)
    if keep:
        return [shown]

    def render(event):
        if isinstance(event, RunFinished) and event.status == "interrupted":
            event = replace(event, summary=event.summary.split("; undo with:")[0].split("; run again:")[0]
                            + f"; {GONE}")
        shown(event)

    render.deferrable = True  # type: ignore[attr-defined]
    return [render]


@contextmanager
def removed_on_interrupt(keep: bool) -> Iterator[None]:
    """Ctrl-C (or SIGTERM) in a rehearsal without --keep: its topology is removed on the way out."""
    from dbmigrate.app.errors import INTERRUPTED, Terminated

    try:
        yield
    except KeyboardInterrupt as exc:
        if keep:
            raise
        code = 128 + exc.signum if isinstance(exc, Terminated) else INTERRUPTED
        raise CommandFailed(code, f"interrupted: {GONE}",
                            hint="rehearse again; --keep leaves the topology for inspection") from None


def checked_report_path(report_file: Optional[Path]) -> Optional[Path]:
    """The `--report` path, refused before anything is started when it cannot be written."""
    if report_file is None:
        return None
    from dbmigrate.app.reports import check_report_path

    return check_report_path(report_file)


def progress_printer(json_out: bool) -> Callable[[str], None]:
    """Where a rehearsal's progress lines go: stderr beside JSON on stdout, else the console."""
    out = err_console if json_out else console
    return lambda m: out.print(f"[dim]… {escape(m)}[/]")


HOLD_HELP = ("Set hold_new_connections in the playbook: HAProxy holds the application's new connections "
             "while the writer moves, and the old writer's sessions end when idle.")
ROUTER_HELP = ("Where the applications write: haproxy (writer and reader ports), or relay: the relay "
               "(relay/, built with Go once) in front of the sandbox, which holds every session at its next "
               "statement and moves it to the new primary, none ended (implies --hold-new-connections; not "
               "with --compose).")
CONSOLIDATE_ROUTER_HELP = ("Where each shard's applications write: dsn-file (they read the shard's writer from the "
                           "DSN file when they connect), or relay: a relay per shard (relay/, built with Go once) "
                           "in front of its old server, named in the inventory's shard_routers; the cutover and "
                           "the rollback hold every session at its next statement and move it to the instance and "
                           "back, none ended (not with --compose).")


@cmd.command("promote")
def promote(
    json_out: bool = typer.Option(False, "--json", help="JSON lines: the report as one result record, then a summary record."),
    load_seconds: int = typer.Option(5, "--load-seconds", help="sysbench window before and after."),
    keep: bool = typer.Option(False, "--keep", help="Leave the sandbox running as the rehearsal left it, for "
                              "inspection: the promote has already run (the candidate is the primary unless "
                              "the guard rolled back); remove it with: dbmigrate sandbox down NAME."),
    name: Optional[str] = typer.Option(None, "--name", help="Name the sandbox (also its cluster and the prefix "
                                       "of its instances); default rehearsal-XXXX."),
    regress: bool = typer.Option(False, "--regress", help="Drop an index the reads use on the candidate only: "
                                 "the latency guard must roll the cutover back."),
    guard: bool = typer.Option(True, "--guard/--no-guard", help="Baseline digest and latency guard around the cutover."),
    remote: bool = typer.Option(False, "--remote", help="Every instance on a host of its own behind sshd; the "
                                "playbook runs in a process that cannot see the instances' directories "
                                "(a mount namespace, as root) and reaches their files only over ssh."),
    report_file: Optional[Path] = typer.Option(None, "--report", help="Write an HTML report (charts, tables) "
                                               "to this file and the same numbers as JSON beside it."),
    compose: bool = typer.Option(False, "--compose", help=COMPOSE_HELP),
    shape: Optional[Path] = typer.Option(None, "--shape", help=SHAPE_HELP),
    scale: float = typer.Option(0.01, "--scale", help="With --shape: generate this share of each captured "
                                "table's rows (at least one row for a table that had rows)."),
    tui: bool = typer.Option(False, "--tui", help=TUI_HELP),
    hold: bool = typer.Option(False, "--hold-new-connections", help=HOLD_HELP),
    router: str = typer.Option("haproxy", "--router", help=ROUTER_HELP),
):
    """Promote a new-hardware replica under live writes, then report loss, fenced window and load."""
    from dbmigrate.app.reports import all_tables, check_report_path, model_of_run, write_report
    from dbmigrate.rehearsal.rehearse import rehearse_promote

    if report_file is not None:
        report_file = check_report_path(report_file)  # before a sandbox is built
    if name is not None:
        from dbmigrate.rehearsal.sandbox.manager import check_name

        check_name(name)
    if compose and remote:
        from dbmigrate.exceptions import UsageError

        raise UsageError("--compose and --remote are two ways to give every server a host of its own: choose one")
    driver = session_driver(tui)

    say = (lambda m: err_console.print(f"[dim]… {m}[/]")) if json_out else (lambda m: console.print(f"[dim]… {m}[/]"))
    with removed_on_interrupt(keep):
        report = rehearse_promote(progress=say, load_seconds=load_seconds, keep=keep,
                                  subscribers=renderers(json_out, keep), regress=regress, guard=guard or regress,
                                  remote=remote, name=name, compose=compose, shape=shape, scale=scale,
                                  driver=driver, router=router,
                                  playbook_extra={"params": {"hold_new_connections": True}} if hold else None)
    model = model_of_run(report["run_id"])
    tables = all_tables(model)
    report["tables"] = [t.to_dict() for t in tables]
    if report_file is not None:
        report["report_files"] = [str(p) for p in write_report(model, report_file)]
    if json_out:
        print_json(report)
    else:
        render_report(report)
        render_shape(report)
        print_tables(tables)
        if report_file is not None:
            console.print(f"report: {report['report_files'][0]} (numbers: {report['report_files'][1]})",
                          markup=False)
        if keep and compose:
            print_kept_compose(report)
        elif keep:
            console.print(f"sandbox {report['sandbox']} kept as the run left it (promote done, primary "
                          f"{report['new_primary']}): dbmigrate sandbox status {report['sandbox']}; "
                          f"dbmigrate sandbox down {report['sandbox']} removes it", markup=False)
    # A regression must be rolled back by the guard itself (a run refused before its cutover is no rollback).
    expected = (report["rolled_back"] and bool((report.get("guard") or {}).get("rollback"))) if regress else \
        (report["run_status"] == "done" and not report["rolled_back"])
    if report["lost_writes"] or not expected or replay_failures(report):
        raise CommandFailed(1, rehearsal_failure(report, regress),
                            hint="see the report above; rehearse again with --keep to inspect the sandbox")


def render_shape(r: dict) -> None:
    """The shape's load and the per-class table: before and after the cutover."""
    if not r.get("classes"):
        return
    sh = r["shape"]
    console.print(f"shape {sh['dir']} at scale {sh['scale']:g}: {sh['tables']} table(s), {sh['rows']} generated "
                  f"row(s), {sh['objects']} object(s), {len(sh['accounts'])} account(s) with {sh['grants']} "
                  f"grant(s), {len(sh.get('roles') or [])} role(s) with {sh.get('role_grants', 0)} role grant(s), "
                  f"{sh.get('proxy_grants', 0)} PROXY grant(s) (passwords in {sh['option_file']}); session settings "
                  f"from {sh['sessions_from']}"
                  + (f"; not replayed (connection set-up): {len(sh['skipped_classes'])} class(es)"
                     if sh["skipped_classes"] else ""), markup=False)
    for user, pool in sorted((sh.get("pools") or {}).items()):
        seen = ", ".join(f"{k}={v}" for k, v in pool["session"].items()) or "server defaults"
        where = ", ".join(f"{n} to {a}" for a, n in (pool.get("opened_to") or {}).items())
        console.print(f"pool {user}: {pool['opened']} connection(s) opened ({where}); its session settings read "
                      f"back: {seen}", markup=False)
    t = Table(title="captured query classes, replayed (before -> after the run)")
    for col in ("class", "account", "rate/s", "count", "p50 ms", "p99 ms", "errors", "errors during the run"):
        t.add_column(col, no_wrap=col != "class")

    def pair(c: dict, key: str) -> str:
        b, a = c["before"].get(key), c["after"].get(key)
        return f"{'-' if b is None else b} -> {'-' if a is None else a}"

    for c in r["classes"]:
        errs = pair(c, "errors")
        codes = {**c["before"]["errors_by_code"], **c["after"]["errors_by_code"]}
        if codes:
            errs += " (" + ", ".join(f"{k}" for k in sorted(codes)) + ")"
        new = c["after"]["errors"] and not c["before"]["errors"]
        t.add_row(escape(c["class"]), c["account"], f"{c['rate']:g}", pair(c, "count"), pair(c, "p50_ms"),
                  pair(c, "p99_ms"), f"[red]{escape(errs)}[/]" if new else escape(errs),
                  escape(", ".join(f"{n} x {k}" for k, n in c["during"]["errors_by_code"].items()) or "0"))
    console.print(t)


def print_kept_compose(report: dict) -> None:
    kept = (report.get("compose") or {}).get("kept") or []
    console.print(f"compose topology {report['sandbox']} kept as the run left it:", markup=False)
    for line in kept:
        console.print(f"  {line}", markup=False)


def render_compose(r: dict) -> None:
    c = r.get("compose")
    if not c:
        return
    execs = c.get("docker_execs") or {}
    console.print(f"compose: {c['compose']}, engine {c['engine']['version']} "
                  f"({'already running' if not c['engine']['started_by_the_run'] else 'started for this run, left running with the kept topology' if c.get('kept') else 'started for this run, stopped after it'})"
                  f"; servers' files reached only through docker exec: "
                  + ", ".join(f"{k} {v}" for k, v in execs.items()), markup=False)


def print_clients(r: dict) -> None:
    """What the application's pools saw, when the rehearsal ran them."""
    if r.get("client_errors") is not None:
        from dbmigrate.rehearsal.clients import console_line

        console.print(console_line(r), markup=False)


def render_report(r: dict) -> None:
    t = Table(title="promote rehearsal")
    t.add_column("")
    t.add_column("before")
    t.add_column("after")

    def shape(rows):
        return "\n".join(f"{s['name']}: {'ro' if s['read_only'] else '[bold]rw[/]'}"
                         f"{' <- ' + s['source'] if s['source'] else ''}" for s in rows)

    t.add_row("topology", shape(r["topology_before"]), shape(r["topology_after"]))
    lb, la = r["load_before"], r["load_after"]
    t.add_row("sysbench tps", f"{lb.get('tps') or 0:.0f}", f"{la.get('tps') or 0:.0f}")
    t.add_row("latency avg ms", f"{lb.get('latency_avg_ms') or 0:.2f}", f"{la.get('latency_avg_ms') or 0:.2f}")
    t.add_row("latency p95 ms", f"{lb.get('latency_p95_ms') or 0:.2f}", f"{la.get('latency_p95_ms') or 0:.2f}")
    console.print(t)
    lost = r["lost_writes"]
    console.print(primary_sentence(r))
    console.print(f"fenced window (longest gap between acknowledged writes across the cutover, fence to router "
                  f"switch): [bold]{r['fenced_ms'] if r['fenced_ms'] is not None else 'no cutover'}"
                  f"{' ms' if r['fenced_ms'] is not None else ''}[/]")
    console.print(f"other write gaps (outside the cutover): {escape(other_gaps_sentence(r['other_write_gaps']))}")
    if r.get("digest"):
        console.print(f"pt-query-digest before -> after: {r['digest']['avg']}; {r['digest']['p95']}")
    if r.get("guard"):
        g = r["guard"]
        console.print(f"latency guard: {'[red]rolled back[/]' if g.get('rollback') else '[green]within policy[/]'}"
                      f" ({'; '.join(g.get('reasons') or []) or 'no rule fired'})")
    if r.get("remote"):
        rem = r["remote"]
        console.print("hosts reached over ssh; instances' directories "
                      + (f"hidden from the tool ({len(rem['hidden'])})" if rem.get("hidden")
                         else f"[yellow]visible[/] ({rem.get('not_hidden_because')})"))
    render_compose(r)
    if r.get("rollback_s") is not None:
        console.print(f"rollback complete {r['rollback_s']} s after the new primary took traffic")
    print_clients(r)
    console.print(f"acknowledged writes: {r['acknowledged_writes']}, lost: "
                  f"{'[green]0[/]' if not lost else f'[red]{lost}[/]'}; run {r['run_id']} {r['run_status']}"
                  f"{' (rolled back)' if r['rolled_back'] else ''}")


def print_tables(tables) -> None:
    from dbmigrate.app.reports import rich_table

    for t in tables:
        console.print(rich_table(t))


@cmd.command("schema-swap")
def schema_swap(
    json_out: bool = typer.Option(False, "--json", help="JSON lines: the report as one result record, then a summary record."),
    keep: bool = typer.Option(False, "--keep", help="Leave the sandbox running as the rehearsal left it (every "
                              "server altered, the original primary back); remove it with: dbmigrate sandbox down NAME."),
    name: Optional[str] = typer.Option(None, "--name", help="Name the sandbox (also its cluster and the prefix "
                                       "of its instances); default swap-XXXX."),
    rows: int = typer.Option(5000, "--rows", help="Rows in app.orders (small data keeps it quick)."),
    compose: bool = typer.Option(False, "--compose", help=COMPOSE_HELP),
    shape: Optional[Path] = typer.Option(None, "--shape", help=SHAPE_HELP),
    scale: float = typer.Option(0.01, "--scale", help="With --shape: generate this share of each captured "
                                "table's rows (at least one row for a table that had rows)."),
    report_file: Optional[Path] = typer.Option(None, "--report", help="Write an HTML report (charts, tables) "
                                               "to this file and the same numbers as JSON beside it."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Ask nothing (a rehearsal never asks: its playbook runs "
                             "with --yes); accepted so that CI jobs read like production runs."),
    tui: bool = typer.Option(False, "--tui", help=TUI_HELP),
    hold: bool = typer.Option(False, "--hold-new-connections", help=HOLD_HELP),
    router: str = typer.Option("haproxy", "--router", help=ROUTER_HELP),
):
    """The weekly A/B schema change under live reads and writes: each replica altered out of the reader
    pool with the binlog off, a switchover to an altered replica, the old primary altered, then back."""
    from dbmigrate.cli.common import guarded
    from dbmigrate.exceptions import UsageError
    from dbmigrate.rehearsal.rehearse_swap import rehearse_schema_swap, succeeded

    def go() -> None:
        if rows < 100 or rows > 1_000_000:
            raise UsageError(f"--rows must be between 100 and 1,000,000, not {rows}")
        if name is not None:
            from dbmigrate.rehearsal.sandbox.manager import check_name

            check_name(name)
        checked_report = checked_report_path(report_file)  # before anything is started
        driver = session_driver(tui)
        say = progress_printer(json_out)
        with removed_on_interrupt(keep):
            report = rehearse_schema_swap(progress=say, keep=keep, name=name, rows=rows, compose=compose,
                                          shape=shape, scale=scale, subscribers=renderers(json_out, keep),
                                          driver=driver, hold=hold, router=router)
        if checked_report is not None:
            from dbmigrate.app.reports import model_of_run, write_report

            report["report_files"] = [str(p) for p in write_report(model_of_run(report["run_id"]), checked_report)]
        if json_out:
            print_json(report)
        else:
            render_swap(report)
            render_shape(report)
            render_compose(report)
            if checked_report is not None:
                console.print(f"report: {report['report_files'][0]} (numbers: {report['report_files'][1]})",
                              markup=False)
            if keep and compose:
                print_kept_compose(report)
        if replay_failures(report):
            raise CommandFailed(1, "the schema swap rehearsal failed: " + replay_failure_text(report),
                                hint="the replay connects as each class's account, to its database, with its "
                                     "session settings: compare with the shape's digest.json and sessions")
        if not succeeded(report):
            raise CommandFailed(1, f"the schema swap rehearsal failed: run {report.get('run_status')}: "
                                   f"{report.get('summary') or 'see the report'}",
                                hint="rehearse again with --keep to inspect the sandbox")

    guarded(go)()


def render_swap(r: dict) -> None:
    t = Table(title="schema swap rehearsal")
    t.add_column("server", no_wrap=True)
    t.add_column("altered")
    t.add_column("after")
    after = {s["name"]: s for s in r["topology_after"]}
    for server, done in r["altered"].items():
        s = after[server]
        t.add_row(server, "yes" if done else "NO",
                  ("ro" if s["read_only"] else "rw") + (f" <- {s['source']}" if s["source"] else ""))
    console.print(t)
    console.print(f"DDL: {r['ddl']}", markup=False)
    fenced = r.get("fenced_ms")
    console.print(f"original primary takes writes again: {'yes' if r['primary_back'] else 'NO'}; fenced window "
                  f"{'not measured' if fenced is None else f'{fenced} ms'}; other gaps between acknowledged writes: "
                  f"{other_gaps_sentence(r.get('other_write_gaps') or [])}; reads {r['reads'].get('queries', 0)}",
                  markup=False)
    print_clients(r)
    console.print(f"acknowledged writes: {r['acknowledged_writes']}, lost: {r['lost_writes']}; run {r['run_id']} "
                  f"{r['run_status']} ({r['elapsed_s']} s)", markup=False)


@cmd.command("consolidate")
def consolidate(
    json_out: bool = typer.Option(False, "--json", help="JSON lines: the report as one result record, then a summary record."),
    remote: bool = typer.Option(False, "--remote", help="Every old server and target host behind its own sshd: "
                                "files and programs only over ssh."),
    rows: int = typer.Option(2000, "--rows", help="Rows per shard (small data keeps it quick)."),
    throttle: float = typer.Option(0, "--throttle", help="Cap each copy at this many MB/s (0: no cap)."),
    keep: bool = typer.Option(False, "--keep", help="Leave the sandbox running for inspection, the provisioned "
                              "instances included; remove it with: dbmigrate sandbox down NAME."),
    name: Optional[str] = typer.Option(None, "--name", help="Name the sandbox (also the prefix of its old "
                                       "servers and instances); default consol-XXXX."),
    compose: bool = typer.Option(False, "--compose", help=COMPOSE_HELP + " The target hosts are containers too: "
                                 "the instances are provisioned into them and seeded physically."),
    shape: Optional[Path] = typer.Option(None, "--shape", help=SHAPE_HELP + " Its schemas are shards of the first "
                                         "old server, and the pool follows the DSN file when it opens a connection "
                                         "(with --router relay: writes through their relays)."),
    scale: float = typer.Option(0.01, "--scale", help="With --shape: generate this share of each captured "
                                "table's rows (at least one row for a table that had rows)."),
    report_file: Optional[Path] = typer.Option(None, "--report", help="Write an HTML report (charts, tables) "
                                               "to this file and the same numbers as JSON beside it."),
    tui: bool = typer.Option(False, "--tui", help=TUI_HELP + " The one-server rollback is b on the board (the "
                             "rehearsal rolls back its last old server itself if the session did not)."),
    router: str = typer.Option("dsn-file", "--router", help=CONSOLIDATE_ROUTER_HELP),
):
    """4 old servers (10 shards, a writer on each) onto 2 hosts x 2 instances: plan, provision, physical
    seeding, fleet cutover, DSN routes (or a relay per shard), one server rolled back; reports loss, checksums and reverse replication."""
    from dbmigrate.cli.common import guarded
    from dbmigrate.exceptions import UsageError
    from dbmigrate.rehearsal.consolidate import ROUTERS, rehearse_consolidate
    from dbmigrate.rehearsal.rehearse import check_router

    def go() -> None:
        if rows < 1 or rows > 1_000_000:
            raise UsageError(f"--rows must be between 1 and 1,000,000, not {rows}")
        if throttle < 0:
            raise UsageError(f"--throttle must be 0 or more MB/s, not {throttle:g}")
        if compose and remote:
            raise UsageError("--compose and --remote are two ways to give every server a host of its own: choose one")
        check_router(router, compose, ROUTERS, compose_routes="the DSN file")  # before anything is started
        if name is not None:
            from dbmigrate.rehearsal.sandbox.manager import check_name

            check_name(name)
        checked_report = checked_report_path(report_file)  # before anything is started
        driver = session_driver(tui)
        say = progress_printer(json_out)
        with removed_on_interrupt(keep):
            report = rehearse_consolidate(progress=say, remote=remote, rows=rows, throttle_mb_s=throttle,
                                          keep=keep, subscribers=renderers(json_out, keep), name=name,
                                          compose=compose, shape=shape, scale=scale, driver=driver,
                                          router=router)
        if checked_report is not None and report.get("run_id"):
            from dbmigrate.app.reports import model_of_run, write_report

            report["report_files"] = [str(p) for p in write_report(model_of_run(report["run_id"]), checked_report)]
        if json_out:
            print_json(report)
        else:
            render_consolidation(report)
            render_shape(report)
            render_compose(report)
            if report.get("report_files"):
                console.print(f"report: {report['report_files'][0]} (numbers: {report['report_files'][1]})",
                              markup=False)
            if keep and compose:
                print_kept_compose(report)
            elif keep:
                console.print(f"sandbox {report['sandbox']} kept as the run left it (its old servers and the "
                              f"{len(report['instances'])} provisioned instances running): {report['remove_with']} "
                              "removes it whole", markup=False)
        if not report["ok"] or replay_failures(report):
            raise CommandFailed(1, "the consolidation rehearsal failed: " + "; ".join(
                                    w for w in (consolidation_failure(report) if not report["ok"] else "",
                                                replay_failure_text(report)) if w),
                                hint="rehearse again with --keep to inspect the sandbox")

    guarded(go)()


def render_consolidation(r: dict) -> None:
    where = "containers (compose)" if r.get("compose") else "remote hosts over ssh" if r["remote"] else "local hosts"
    through = ", a relay per shard" if r.get("router") == "relay" else ""
    t = Table(title=f"consolidation rehearsal ({where}{through})")
    for c in ("shard", "old server", "instance", "served by", "consolidate status", "acked", "on new", "lost",
              "checksum"):
        t.add_column(c)
    stage = {s["shard"]: s["stage"] + ("; " + "; ".join(s["problems"]) if s["problems"] else "")
             for s in r.get("status", {}).get("shards", [])}
    for sh, s in r["shards"].items():
        t.add_row(sh, s["old_server"], f"{s['instance']} ({r['instances'][s['instance']]['address']})",
                  s["served_by"] + ("" if s["served_by"] == s["expected"] else " (!)"), stage.get(sh, "?"),
                  str(s["acknowledged"]), str(s["acked_on_new"]), str(s["lost"]),
                  "equal" if not s["checksum_differences"] else ", ".join(s["checksum_differences"]))
    console.print(t)
    wrong_ports = r.get("ports_not_as_planned") or []
    console.print("every instance listens at its planned port" if not wrong_ports else
                  "[red]ports not as planned:[/] " + "; ".join(wrong_ports))
    for key, seed in r["seeds"].items():
        console.print(f"seed {key}: {seed['method']}, {seed['bytes'] / 1e6:.1f} MB in {seed.get('copy_s', seed.get('total_s'))} s"
                      + (f" ({seed['rate_mb_s']} MB/s, paused {seed['pauses']}x)" if "rate_mb_s" in seed else ""))
    for old, back in r["old_servers_replicating_back"].items():
        ok = back["read_only"] and all(v["running"] and v["caught_up"] for v in back["from"].values())
        console.print(f"{old}: {'[green]replicates back[/]' if ok else '[red]not replicating back[/]'} from "
                      f"{', '.join(back['from'])}{' (read-only)' if back['read_only'] else ' (WRITABLE)'}")
    if r["rollback"]:
        console.print(f"rollback of one server: {r['rollback']}", markup=False)
    print_clients(r)
    console.print(f"run {r['run_id']} {r['run_status']}; acknowledged writes {r['acknowledged_writes']}, lost "
                  f"{r['lost_writes']}; checksum differences {r['checksum_differences']}; misrouted shards "
                  f"{r['misrouted_shards']}; {r['elapsed_s']} s")


def rehearsal_failure(report: dict, regress: bool) -> str:
    """Why a promote rehearsal did not end as expected, in one line."""
    why = []
    if report["lost_writes"]:
        why.append(f"{report['lost_writes']} acknowledged write(s) lost")
    if regress and not report.get("guard"):
        # Stopped before the guard judged anything: its steps above say where.
        why.append(f"the run stopped before the guard judged (run {report['run_status']}"
                   + (", rolled back" if report["rolled_back"] else "") + "); its steps above say where")
    elif regress and not (report["rolled_back"] and report["guard"].get("rollback")):
        why.append(f"the guard did not roll back (run {report['run_status']})")
    elif not regress and (report["run_status"] != "done" or report["rolled_back"]):
        why.append(f"run {report['run_status']}" + (", rolled back" if report["rolled_back"] else ""))
    if replay_failures(report):
        why.append(replay_failure_text(report))
    return "the promote rehearsal failed: " + "; ".join(why)


def replay_failures(report: dict) -> list[str]:
    """The shape's classes that failed when replayed (and not at capture)."""
    return list((report.get("shape") or {}).get("failed_classes") or [])


def replay_failure_text(report: dict) -> str:
    failed = replay_failures(report)
    return f"{len(failed)} replayed class(es) failed that the application ran without error: " + "; ".join(failed)


def consolidation_failure(report: dict) -> str:
    """Which of a consolidation rehearsal's conditions failed, in one line."""
    counts = ("lost_writes", "checksum_differences", "misrouted_shards", "old_servers_not_replicating_back")
    why = [f"{k.replace('_', ' ')}: {report[k]}" for k in counts if report.get(k)]
    if report.get("run_status") != "done":
        why.append(f"run {report.get('run_status')}: {report.get('summary')}")
    if not report.get("rollback"):
        why.append("rolling one old server back did not happen")
    if report.get("ports_not_as_planned"):
        why.append(f"ports not as planned: {report['ports_not_as_planned']}")
    why += [str(p) for p in (report.get("status") or {}).get("problems", [])]
    return "; ".join(why) or "see the report"


def primary_sentence(r: dict) -> str:
    """Who is primary after the rehearsal; after the guard's rollback that is the original one again."""
    if r["rolled_back"]:
        return (f"primary after the rollback: [bold]{r['new_primary']}[/] (the original: {r['candidate']} was "
                f"promoted, then the cutover was rolled back)")
    return (f"new primary: [bold]{r['new_primary']}[/]  old primary replicating from it: "
            f"{'[green]yes[/]' if r['old_primary_replicating'] else '[red]no[/]'}")


def other_gaps_sentence(gaps: list) -> str:
    """'3012.4 ms during collect baseline digest; ...', or that there was none worth naming."""
    if not gaps:
        return "none worth naming"
    return "; ".join(f"{g['ms']} ms during {', '.join(g['steps'])}" for g in gaps)


@cmd.command("down")
def down(name: str = typer.Argument(..., help="The sandbox's or topology's name (as printed by --keep).")):
    """Remove what `rehearse ... --keep` left: a sandbox (its servers, the instances a consolidation
    provisioned, their sshd hosts and files, as `sandbox down` does), or a compose topology (its
    containers, volumes and files, and the Docker Engine the rehearsal started for it)."""
    from dbmigrate.rehearsal.compose.run import teardown
    from dbmigrate.rehearsal.sandbox.manager import Sandboxes

    boxes = Sandboxes()
    if name in {s.name for s in boxes.list()}:
        stopped = boxes.down(name)
        console.print(f"removed sandbox {name} (stopped: {', '.join(stopped) or 'nothing was running'})",
                      markup=False)
        return
    teardown(name, progress=lambda m: console.print(f"[dim]… {m}[/]"))
    console.print(f"removed compose topology {name}", markup=False)
