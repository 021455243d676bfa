"""`dbmigrate rehearse ...`: run a procedure end to end on a throwaway local sandbox."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from dbmigrate.cli.common import console, err_console, print_json

cmd = typer.Typer(help="Rehearse procedures on a throwaway local sandbox of real servers, under load.",
                  no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(cmd, name="rehearse")


@cmd.command("promote")
def promote(
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object (the report)."),
    load_seconds: int = typer.Option(5, "--load-seconds", help="sysbench window before and after."),
    keep: bool = typer.Option(False, "--keep", help="Leave the sandbox running for inspection."),
    regress: bool = typer.Option(False, "--regress", help="Drop an index the reads use on the candidate only: "
                                 "the latency guard must roll the cutover back."),
    guard: bool = typer.Option(True, "--guard/--no-guard", help="Baseline digest and latency guard around the cutover."),
    remote: bool = typer.Option(False, "--remote", help="Every instance on a host of its own behind sshd; the "
                                "playbook runs in a process that cannot see the instances' directories "
                                "(a mount namespace, as root) and reaches their files only over ssh."),
    report_file: Optional[Path] = typer.Option(None, "--report", help="Write an HTML report (charts, tables) "
                                               "to this file and the same numbers as JSON beside it."),
):
    """Promote a new-hardware replica under live writes, then report loss, fenced window and load."""
    from dbmigrate.app.reports import model_of_run
    from dbmigrate.cli.render import ConsoleRenderer
    from dbmigrate.rehearsal.rehearse import rehearse_promote
    from dbmigrate.report.tables import all_tables
    from dbmigrate.report.write import check_report_path, write_report

    if report_file is not None:
        report_file = check_report_path(report_file)  # before a sandbox is built

    say = (lambda m: err_console.print(f"[dim]… {m}[/]")) if json_out else (lambda m: console.print(f"[dim]… {m}[/]"))
    subscribers = [] if json_out else [ConsoleRenderer(console)]
    report = rehearse_promote(progress=say, load_seconds=load_seconds, keep=keep, subscribers=subscribers,
                              regress=regress, guard=guard or regress, remote=remote)
    model = model_of_run(report["run_id"])
    tables = all_tables(model)
    report["tables"] = [t.to_dict() for t in tables]
    if report_file is not None:
        report["report_files"] = [str(p) for p in write_report(model, report_file)]
    if json_out:
        print_json(report)
    else:
        render_report(report)
        print_tables(tables)
        if report_file is not None:
            console.print(f"report: {report['report_files'][0]} (numbers: {report['report_files'][1]})",
                          markup=False)
    expected = report["rolled_back"] if regress else (report["run_status"] == "done" and not report["rolled_back"])
    if report["lost_writes"] or not expected:
        raise typer.Exit(1)


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
    console.print(f"new primary: [bold]{r['new_primary']}[/]  old primary replicating from it: "
                  f"{'[green]yes[/]' if r['old_primary_replicating'] else '[red]no[/]'}")
    console.print(f"fenced window (longest gap between acknowledged writes): [bold]{r['fenced_ms']} ms[/]")
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
    if r.get("rollback_s") is not None:
        console.print(f"rollback complete {r['rollback_s']} s after the new primary took traffic")
    console.print(f"acknowledged writes: {r['acknowledged_writes']}, lost: "
                  f"{'[green]0[/]' if not lost else f'[red]{lost}[/]'}; run {r['run_id']} {r['run_status']}"
                  f"{' (rolled back)' if r['rolled_back'] else ''}")


def print_tables(tables) -> None:
    from dbmigrate.report.tables import rich_table

    for t in tables:
        console.print(rich_table(t))
