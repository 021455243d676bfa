"""Turning events and journal records into something people (or jq) can read."""

from __future__ import annotations

import json
import sys
import threading
from typing import IO, Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from dbmigrate.cli import jsonout
from dbmigrate.console_table import Col, show, styled

from dbmigrate.engine.events import (
    Event,
    GateDecided,
    GateWaiting,
    HookFinished,
    Log,
    Metric,
    PhaseStarted,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    event_to_dict,
)
from dbmigrate.app.runs import AutoGate, ManualGate, Procedure

_STATUS_MARK = {
    "done": "[green]✓[/]",
    "skipped": "[dim]↷[/]",
    "dry-run": "[cyan]≈[/]",
    "undone": "[yellow]↶[/]",
    "not_undone": "[bold yellow]≠[/]",
    "failed": "[bold red]✗[/]",
    "interrupted": "[bold red]![/]",
}
_RUN_STYLE = {"done": "green", "rolled_back": "yellow", "refused": "magenta", "running": "cyan"}


def _ms(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.1f} ms" if value < 1000 else f"{value / 1000:.2f} s"


class JsonLinesRenderer:
    """--json: one `event` record per event per line, flushed at once so pipes see progress
    (through the command's JSON session when there is one, so its summary counts them)."""

    deferrable = True  # a fenced window's events are written when it closes (EventBus.hold)

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        session = jsonout.current()
        if session is not None:
            session.event(event)
            return
        line = json.dumps({"record": "event", **event_to_dict(event)}, default=str, sort_keys=False)
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()


class ConsoleRenderer:
    """Human progress: one line per step, gate and hook, in the order they happen."""

    deferrable = True  # a fenced window's lines are printed when it closes (EventBus.hold)

    def __init__(self, console: Console | None = None, *, verbose: bool = False) -> None:
        self.console = console or Console()
        self.verbose = verbose

    def __call__(self, event: Event) -> None:
        c = self.console
        if isinstance(event, RunStarted):
            mode = "rollback of" if event.rollback else "resuming" if event.resumed else "run"
            dry = " [cyan](dry run: nothing is changed)[/]" if event.dry_run else ""
            c.print(f"[bold]{mode} {escape(event.run_id)}[/]: {escape(event.procedure)} on "
                    f"cluster [bold]{escape(event.cluster)}[/]{dry}")
        elif isinstance(event, PhaseStarted):
            c.print(f"[bold blue]── {escape(event.phase)}[/]")
        elif isinstance(event, StepStarted) and self.verbose:
            c.print(f"  {'  ' if event.parent else ''}[dim]… {escape(event.name)}[/]")
        elif isinstance(event, StepFinished):
            mark = _STATUS_MARK.get(event.status, "?")
            what = escape(event.sentence or ("" if event.error else event.status))
            err = f"[red]{escape(event.error)}[/]" if event.error else ""
            undo = "undo " if event.action == "undo" else ""
            detail = " ".join(part for part in (what, err) if part)
            indent = "    " if event.parent else "  "  # a fleet's per-server step, under its fleet step
            c.print(f"{indent}{mark} {undo}{escape(event.name)}: {detail} [dim]{_ms(event.duration_ms)}[/]")
        elif isinstance(event, GateWaiting) and event.kind == "manual":
            c.print(f"  [bold yellow]?[/] gate {escape(event.gate)}: {escape(event.prompt)}")
        elif isinstance(event, GateDecided):
            mark = "[green]✓[/]" if event.ok else "[bold red]✗[/]"
            c.print(f"  {mark} gate {escape(event.gate)} ({event.by}): {escape(event.reason)}")
        elif isinstance(event, HookFinished):
            mark = "[green]✓[/]" if event.status == "ok" else "[bold red]✗[/]"
            c.print(f"  {mark} hook {event.hook}: {escape(event.command)} [dim]{_ms(event.duration_ms)}[/]")
            if event.status != "ok" and event.stderr_tail:
                c.print(f"    [red]{escape(event.stderr_tail)}[/]")
        elif isinstance(event, Metric) and self.verbose:
            c.print(f"  [dim]{escape(event.name)} = {event.value:g} {escape(event.unit)}[/]")
        elif isinstance(event, Log) and event.level == "progress":
            c.print(f"  [dim]… {escape(event.message)}[/]")  # a long step's progress: always shown
        elif isinstance(event, Log) and (self.verbose or event.level in ("warning", "error")):
            style = "yellow" if event.level == "warning" else "red" if event.level == "error" else "dim"
            c.print(f"  [{style}]{event.level}: {escape(event.message)}[/]")
        elif isinstance(event, RunFinished):
            style = _RUN_STYLE.get(event.status, "bold red")
            c.print(f"[{style}]{event.status}[/]: {escape(event.summary)}")


def console_approver(console: Console | None = None, stdin: IO[str] | None = None):
    """Ask the operator at the terminal; refuse when there is no terminal to ask."""
    console = console or Console(stderr=True)
    stdin = stdin or sys.stdin

    def approve(waiting: GateWaiting) -> tuple[bool, str]:
        if not stdin.isatty():
            return False, "no terminal to ask the operator; pass --yes to approve in scripted runs"
        where = f"cluster {waiting.cluster}: " if waiting.cluster else ""
        # `\[`: a bare [y/N] is read as rich markup and vanishes.
        console.print(f"[bold yellow]{escape(where + waiting.prompt)}[/] \\[y/N] ", end="")
        answer = stdin.readline().strip().lower()
        if answer in ("y", "yes"):
            return True, "approved by operator"
        return False, "declined by operator"

    approve.can_ask = stdin.isatty  # type: ignore[attr-defined]
    return approve


def console_chooser(console: Console | None = None, stdin: IO[str] | None = None):
    """`last` with runs of several clusters: the operator picks one at the terminal; with no
    terminal to ask, None (the command then asks for --cluster)."""
    from dbmigrate.app.runs import age_text

    console = console or Console(stderr=True)
    stdin = stdin or sys.stdin

    def choose(candidates: list[dict[str, Any]]) -> str | None:
        if not stdin.isatty():
            return None
        console.print("'last' could mean the newest run of any of these clusters:", markup=False)
        for i, c in enumerate(candidates, 1):
            console.print(f"  {i}. cluster {c['cluster']}: {c['procedure']} run {c['id']}, {c['status']}, "
                          f"started {age_text(c['age_s'])} ago", markup=False)
        console.print(f"[bold yellow]which one? (1-{len(candidates)}, empty: none)[/] ", end="")
        answer = stdin.readline().strip()
        if answer.isdigit() and 1 <= int(answer) <= len(candidates):
            return candidates[int(answer) - 1]["id"]
        return None

    return choose


def render_plan(procedure: Procedure, console: Console) -> None:
    console.print(f"[bold]{escape(procedure.name)}[/]" + (f": {escape(procedure.description)}"
                                                         if procedure.description else ""))
    index = 0
    for phase in procedure.phases:
        console.print(f"[bold blue]── {escape(phase.name)}[/]")
        for gate in phase.gates:
            kind = "manual gate" if isinstance(gate, ManualGate) else "auto gate" if isinstance(gate, AutoGate) else "gate"
            console.print(f"   [yellow]◆ {kind}[/] {escape(gate.name)}")
        for step in phase.steps:
            flags = [] if step.mutating else ["read-only"]
            if step.undo is not None:
                flags.append("undoable")
            suffix = f" [dim]({', '.join(flags)})[/]" if flags else ""
            console.print(f"   {index + 1:>2}. {escape(step.name)}{suffix}")
            index += 1
    if procedure.rollback_on_failure:
        console.print("[dim]on failure: completed steps are undone automatically, newest first[/]")


def plan_to_dict(procedure: Procedure) -> dict[str, Any]:
    return {
        "procedure": procedure.name,
        "rollback_on_failure": procedure.rollback_on_failure,
        "phases": [
            {
                "name": phase.name,
                "gates": [{"name": g.name, "kind": g.kind} for g in phase.gates],
                "steps": [{"name": s.name, "mutating": s.mutating, "undoable": s.undo is not None}
                          for s in phase.steps],
            }
            for phase in procedure.phases
        ],
    }


def render_runs_table(runs: list[dict[str, Any]], console: Console) -> None:
    # The run id already says when it started (UTC); ids, procedures, clusters and
    # statuses are shown whole (ids are copied into resume/rollback), the summary wraps.
    show(console, [Col("run", keep=True), Col("procedure", keep=True), Col("cluster", keep=True),
                   Col("status", keep=True), Col("summary")],
         [[run["id"], run["procedure"], run["cluster"],
           styled(run["status"] + (" (dry run)" if run["dry_run"] else ""), _RUN_STYLE.get(run["status"], "red")),
           run["summary"] or ""] for run in runs])


def render_run_detail(detail: dict[str, Any], console: Console) -> None:
    dry = " (dry run)" if detail["dry_run"] else ""
    console.print(f"[bold]run {detail['id']}[/]: {detail['procedure']} on {detail['cluster']}{dry}")
    console.print(f"status [{_RUN_STYLE.get(detail['status'], 'bold red')}]{detail['status']}[/]"
                  f" · started {detail['started_at']} by {detail['holder']} (pid {detail['pid']})"
                  + (f" · finished {detail['finished_at']}" if detail["finished_at"] else ""))
    if detail["playbook"]:
        console.print(f"playbook {escape(detail['playbook'])}")
    if detail["summary"]:
        console.print(escape(detail["summary"]))
    rows = []
    for row in detail["steps"]:
        what = Text(row["sentence"] or "")
        if row["error"]:
            what.append((" " if what.plain else "") + row["error"], style="red")
        name = ("undo " if row["action"] == "undo" else "") + row["name"]
        rows.append([row["index"] + 1, row["phase"], name,
                     Text.assemble(Text.from_markup(_STATUS_MARK.get(row["status"], "")), f" {row['status']}"),
                     what, _ms(row["duration_ms"])])
    show(console, [Col("#", keep=True, right=True), Col("phase", keep=True), Col("step"), Col("status", keep=True),
                   Col("what happened"), Col("time", keep=True, right=True)], rows, title="steps")
    for row in detail.get("not_undone", []):
        console.print(f"[bold yellow]not undone[/]: step {escape(row['step'])} left its change in place:")
        for st in row["left"] or [{"server": "", "sql": row["sentence"]}]:
            console.print(f"  {escape(st['server'] or '-')}: {escape(st['sql'])}")
    for gate in detail["gates"]:
        mark = "[green]✓[/]" if gate["ok"] else "[red]✗[/]"
        console.print(f"gate {mark} {gate['name']} before {gate['phase']} ({gate['decided_by']}): "
                      f"{escape(gate['reason'] or '')}")
    for hook in detail["hooks"]:
        console.print(f"hook {hook['hook']} {hook['phase'] or ''} {escape(hook['command'])}: {hook['status']}"
                      + (f" (exit {hook['exit_code']})" if hook["exit_code"] not in (None, 0) else ""))
        if hook["status"] != "ok" and hook["stderr_tail"]:
            console.print(f"  [red]{escape(hook['stderr_tail'])}[/]")
    if detail["statements"]:
        console.print(f"[bold]statements[/] ({len(detail['statements'])})")
        for st in detail["statements"]:
            tag = "would send" if st["dry_run"] else _ms(st["duration_ms"])
            console.print(f"  [dim]{st['at']}[/] {escape(st['server'] or '-')}: {escape(st['sql'])} [dim]{tag}[/]")
    for log in detail["logs"]:
        if log["level"] in ("warning", "error"):
            console.print(f"[yellow]{log['level']}[/]: {escape(log['message'] or '')}")
