"""`dbmigrate tui PLAYBOOK`: an interactive cutover session.

Left, the plan (phases, gates, steps) with live statuses; right, replication
lag, writer latency, warm-up and the run's log. The run itself is the same
`start_run` / `rollback_run` the command line uses, in a worker thread: its
events and gate questions arrive here as messages, and the operator's answers
go back through the GateKeeper. Panels sample the servers in another worker.
Nothing in this module talks to a server on the UI thread.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Header
from textual.worker import get_current_worker

from dbmigrate.app.errors import failure_of, redact
from dbmigrate.app.runs import RunOutcome, describe_playbook, explain, plan_playbook, rollback_run, start_run
from dbmigrate.app.consolidate.board import fleet_layout
from dbmigrate.app.session import journal_note
from dbmigrate.tui.fleet import FleetBoard
from dbmigrate.tui.fleet_keys import FleetKeys
from dbmigrate.tui.swap import SwapBoard
from dbmigrate.tui.widgets.fleet import FleetInfo, SwapTable, fleet_widgets
from dbmigrate.engine.events import (Event, GateDecided, GateWaiting, Log, Metric, RunFinished, StepFinished,
                                     StepStarted)
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.tui.board import RunBoard
from dbmigrate.tui.gatekeeper import GateKeeper
from dbmigrate.tui.messages import ClusterSampled, EngineEvent, GateAsked, RunEnded
from dbmigrate.app.monitor import ClusterMonitor
from dbmigrate.tui.widgets import EventLog, GateModal, KeysScreen, LagPanel, LatencyPanel, StepList, WarmPanel
from dbmigrate.tui.widgets.keys import QUIT_CONFIRM_S, keys_line
SHORT_ROWS = 30  # up to this many rows the panels are shorter (app.tcss: Screen.short)
# A new run is offered only after a run that left nothing changed behind it.
RESTARTABLE = ("idle", "did not start", "rolled_back", "refused", "cancelled", "declined")


class CutoverApp(FleetKeys, App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "dbmigrate"
    BINDINGS = [
        Binding("g", "start", "start run"),
        Binding("a", "abort", "abort"),
        Binding("r", "rollback", "roll back"),
        Binding("q", "quit", "quit"),
        Binding("question_mark", "keys", "keys"),
        # The consolidation board's keys (active on that board only). Named in the board's title
        # and in `?`, not in the footer: there they pushed `? keys` off an 80-column screen.
        Binding("plus", "throttle(2.0)", "faster", show=False),
        Binding("minus", "throttle(0.5)", "slower", show=False),
        Binding("p", "pause", "pause", show=False),
        Binding("b", "rollback_server", "server back", show=False),
    ]

    def __init__(
        self,
        playbook_path: Path,
        *,
        journal_path: Path | None = None,
        autostart: bool = False,
        dry_run: bool = False,
        monitor: bool = True,
        monitor_interval_s: float = 1.0,
        lag_limit_ms: float = 1000.0,
        handle_signals: bool = False,
        stamp: Callable[[], str] | None = None,
        rehearsal: bool = False,
    ) -> None:
        super().__init__()
        # Plan and playbook errors surface before the screen takes over the terminal.
        self.playbook_path = Path(playbook_path)
        playbook = describe_playbook(self.playbook_path, journal_path)
        self.board = RunBoard(plan_playbook(self.playbook_path))
        layout = fleet_layout(self.playbook_path)
        self.fleet = FleetBoard(layout) if layout is not None else None
        self.swap = SwapBoard(self.board) if self.board.procedure_name == "schema-swap" else None
        self.cluster = playbook.cluster
        self.inventory_path = playbook.inventory_path
        self.journal_path = playbook.journal_path
        self.autostart = autostart
        self.dry_run = dry_run
        self.rehearsal = rehearsal  # a rehearsal's run: marked so in the journal (`last` never means it)
        # A fleet has a writer per old server: the board shows the copies' own figures instead.
        self.monitor_enabled = monitor and self.inventory_path is not None and self.fleet is None
        self.monitor_interval_s = monitor_interval_s
        self.lag_limit_ms = lag_limit_ms

        self.cancel = threading.Event()  # read by the runner before each gate and step
        self.gates = GateKeeper(ask=lambda waiting: self.post_message(GateAsked(waiting)))
        self.busy: str | None = None  # "run" or "rollback" while a worker drives the engine
        self.outcome: RunOutcome | None = None  # the last run's or rollback's outcome
        self.error: str | None = None  # why the last run or rollback could not start
        self.event_log: list[str] = []  # what the log pane shows, as plain lines
        self._quit_armed_at: float | None = None
        self.stopping = False  # the operator quit during a run: close once it has stopped
        self._stop_monitor = threading.Event()
        self.stamp = stamp or (lambda: time.strftime("%H:%M:%S"))  # the log's time of day
        self.handle_signals = handle_signals  # SIGHUP/SIGTERM stop the run (the command line's session)
        self.stopped_by: str | None = None  # the signal that stopped the session, if one did
        self._saved_handlers: dict[int, object] = {}

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Header()
        if self.fleet is not None:
            with Vertical(id="fleet-main"):
                yield from fleet_widgets()
                with Horizontal(id="fleet-bottom"):
                    with VerticalScroll(id="left"):
                        yield StepList(self.board, id="steps")
                    yield EventLog(id="log")
            yield Footer()
            return
        with Horizontal(id="main"):
            if self.swap is not None:
                with Vertical(id="left-col"):
                    table = SwapTable(id="swap")
                    table.border_title = "sides, one at a time"
                    yield table
                    yield FleetInfo(id="swap-switchover")
                    with VerticalScroll(id="left"):
                        yield StepList(self.board, id="steps")
            else:
                with VerticalScroll(id="left"):
                    yield StepList(self.board, id="steps")
            with Vertical(id="right"):
                yield LagPanel(self.lag_limit_ms, self.monitor_interval_s, id="lag")
                yield LatencyPanel(self.monitor_interval_s, id="latency")
                yield WarmPanel(id="warm")
                yield EventLog(id="log")
        yield Footer()

    def on_mount(self) -> None:
        self.screen.set_class(self.size.height <= SHORT_ROWS, "short")
        self.sub_title = f"{self.board.procedure_name} on {self.cluster} · {self.playbook_path.name}"
        self.query_one("#log", EventLog).border_title = "log (Tab, ↑↓, PgUp/PgDn)"
        self.query_one("#left").border_title = "plan (Tab, ↑↓, PgUp/PgDn)"
        if self.swap is not None:
            self._show_swap()
        if self.fleet is not None:
            self._show_fleet()
            self.set_interval(1.0, self._fleet_tick)
        elif self.monitor_enabled:
            self._monitor()
        else:
            why = "the playbook names no inventory" if self.inventory_path is None else "monitoring is off"
            self.query_one(LagPanel).off(f"{why}: no lag or latency samples")
        if self.handle_signals:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGHUP, signal.SIGTERM):
                self._saved_handlers[signum] = signal.getsignal(signum)
                loop.add_signal_handler(signum, self.stop_on_signal, signum)
        self.say(f"playbook {self.playbook_path} · journal {self.journal_path}")
        if self.autostart:
            self.action_start()
        else:
            self.say("press g to start the run")

    def on_resize(self, event) -> None:
        self.screen.set_class(self.size.height <= SHORT_ROWS, "short")

    def on_unmount(self) -> None:
        if self.handle_signals:
            loop = asyncio.get_running_loop()
            for signum, handler in self._saved_handlers.items():
                loop.remove_signal_handler(signum)
                signal.signal(signum, handler)  # the command's own handlers again, not the default
        self._stop_monitor.set()
        if self.busy == "run":
            self.cancel.set()  # the session is gone: stop before the next step
        self.gates.refuse_all("the operator closed the session")

    # ------------------------------------------------------------------ keys

    def action_start(self) -> None:
        if self.busy is not None:
            self.notify(f"a {self.busy} is in progress", severity="warning")
            return
        if self.board.status not in RESTARTABLE and self.board.counts().get("done"):
            self.notify(f"run {self.board.run_id} ended '{self.board.status}' with steps done: "
                        f"r rolls it back, or continue it with: dbmigrate resume {self.board.run_id}",
                        severity="warning", timeout=10)
            return
        if self.board.status != "idle":
            self.board.reset()
            self._show_board()
        self.cancel.clear()
        self.gates.reopen()
        self.outcome, self.error, self.busy = None, None, "run"
        self.say("starting the run" + (" (dry run)" if self.dry_run else ""))
        self._drive("run")

    def action_abort(self) -> None:
        if self.busy is None:
            self.notify("nothing is running", severity="warning")
            return
        if self.busy == "rollback":
            self.notify("a rollback runs to its end: stopping it half-way would leave two half-states",
                        severity="warning")
            return
        self.cancel.set()
        self.gates.refuse_all("run aborted by operator")
        if isinstance(self.screen, GateModal):
            self.screen.dismiss((False, "run aborted by operator"))
        step = self.board.running_step()
        where = f"after step '{step.name}' finishes" if step else "before the next gate or step"
        undo = "; completed steps are then undone" if self.board.rollback_on_failure else ""
        self.say(f"abort requested: the run stops {where}{undo}", "warning")

    def action_rollback(self) -> None:
        if self.busy is not None:
            self.notify(f"a {self.busy} is in progress; roll back after it ended", severity="warning")
            return
        if not self.board.run_id:
            self.notify("no run to roll back in this session", severity="warning")
            return
        if self.board.status == "rolled_back":
            self.notify(f"run {self.board.run_id} is already rolled back", severity="warning")
            return
        self.cancel.clear()
        self.gates.reopen()
        self.outcome, self.error, self.busy = None, None, "rollback"
        self.say(f"rolling back run {self.board.run_id}")
        self._drive("rollback")

    async def action_quit(self) -> None:
        if self.busy is None:
            self.exit()
            return
        if self.stopping:
            self.notify("stopping… the session closes once the run has stopped", severity="warning")
            return
        now = time.monotonic()
        if self._quit_armed_at is not None and now - self._quit_armed_at <= QUIT_CONFIRM_S:
            if self.busy == "run":
                self.cancel.set()
            self.gates.refuse_all("the operator closed the session")
            if isinstance(self.screen, GateModal):
                self.screen.dismiss((False, "the operator closed the session"))
            # The screen stays up while the run stops (and undoes what it must): the steps
            # and the log show the progress, and the session closes when the run has ended.
            self.stopping = True
            self.sub_title = f"stopping… {self.board.procedure_name} on {self.cluster}"
            step = self.board.running_step()
            where = f"after step '{step.name}'" if step else "at the next step boundary"
            undo = ", then undoes its completed steps" if self.board.rollback_on_failure and self.busy == "run" else ""
            self.say(f"stopping…: the {self.busy} stops {where}{undo}; the session closes when it has", "warning")
            return
        self._quit_armed_at = now
        step = self.board.running_step()
        what = f"step '{step.name}' is running" if step else f"a {self.busy} is in progress"
        self.notify(f"{what}: press q again within {QUIT_CONFIRM_S:g} s to quit (the run stops before its "
                    f"next step)", severity="warning", timeout=QUIT_CONFIRM_S)

    def stop_on_signal(self, signum: int) -> None:
        """SIGHUP (the terminal is gone) or SIGTERM: stop the run as `dbmigrate run` does on SIGTERM
        (the running step finishes, a cutover in progress is undone), say so in the journal,
        and close the session once the run has stopped. No one is there to answer a gate."""
        name = signal.Signals(signum).name
        why = f"{name} (the terminal was lost)" if signum == signal.SIGHUP else name
        self.stopped_by = name
        if self.busy is None:
            self.exit()
            return
        if self.busy == "run":
            self.cancel.set()
        self.gates.refuse_all(f"stopped by {why}")
        if isinstance(self.screen, GateModal):
            self.screen.dismiss((False, f"stopped by {why}"))
        step = self.board.running_step()
        where = f"after step '{step.name}'" if step else "at the next step boundary"
        undo = ", then undoes its completed steps" if self.board.rollback_on_failure and self.busy == "run" else ""
        line = f"{why}: the session stops the {self.busy} {where}{undo}, as on SIGTERM"
        self.stopping = True
        self.say(line, "warning")
        if self.board.run_id:
            try:
                journal_note(self.board.run_id, line, journal_path=self.journal_path)
            except Exception as exc:  # the stop itself must go on
                self.say(f"could not note the signal in the journal: {explain(exc)}", "error")

    def action_keys(self) -> None:
        if isinstance(self.screen, KeysScreen):
            self.screen.dismiss(None)
            return
        self.say(keys_line(fleet=self.fleet is not None))
        self.push_screen(KeysScreen(fleet=self.fleet is not None))

    # ------------------------------------------------------------------ workers

    @work(thread=True, exclusive=True, group="engine", name="engine")
    def _drive(self, mode: str) -> None:
        """Runs in a worker thread: the engine, with this session as subscriber and approver."""
        relay = self._relay
        try:
            if mode == "run":
                outcome = start_run(self.playbook_path, subscribers=[relay], approver=self.gates,
                                    dry_run=self.dry_run, journal_path=self.journal_path, cancel=self.cancel,
                                    rehearsal=self.rehearsal)
            else:
                outcome = rollback_run(self.board.run_id, subscribers=[relay], approver=self.gates,
                                       journal_path=self.journal_path)
        except Exception as exc:  # the session must show it, not die with a traceback mid-cutover
            failure = failure_of(exc)
            if failure is None:
                self._ended(RunEnded(mode, None, f"internal error: {explain(exc)}"))
            else:
                self._ended(RunEnded(mode, None, failure.message, failure.hint))
            return
        self._ended(RunEnded(mode, outcome))

    def _ended(self, message: RunEnded) -> None:
        # Kept on the app as well: after a forced quit no screen receives the message,
        # and the command still reports how the run ended.
        self.outcome, self.error = message.outcome, message.error
        self.post_message(message)

    def _relay(self, event: Event) -> None:
        """Event bus subscriber (worker thread): hand the event to the UI thread."""
        self.post_message(EngineEvent(event))

    @work(thread=True, group="monitor", name="monitor")
    def _monitor(self) -> None:
        worker = get_current_worker()
        assert self.inventory_path is not None
        try:
            monitor = ClusterMonitor(self.inventory_path, self.cluster, limit_ms=self.lag_limit_ms,
                                     write_heartbeat=not self.dry_run)
        except DbmigrateError as exc:
            self.post_message(ClusterSampled(None, redact(exc.message)))
            return
        try:
            while not (worker.is_cancelled or self._stop_monitor.is_set()):
                started = time.monotonic()
                try:
                    self.post_message(ClusterSampled(monitor.sample()))
                except Exception as exc:  # a panel never takes the session down
                    self.post_message(ClusterSampled(None, explain(exc)))
                self._stop_monitor.wait(max(0.05, self.monitor_interval_s - (time.monotonic() - started)))
        finally:
            monitor.close()

    # ------------------------------------------------------------------ messages

    def on_engine_event(self, message: EngineEvent) -> None:
        event = message.event
        if self.board.apply(event):
            self._show_board()
        if self.stopping and isinstance(event, StepStarted):
            doing = "undoing" if event.action == "undo" else "finishing"
            self.sub_title = f"stopping… {doing} {event.name}"
            self.say(f"stopping…: {doing} {event.name}", "warning")
        if self.fleet is not None and self.fleet.apply(event):
            self._show_fleet()
        if isinstance(event, Metric):
            if self.fleet is not None:
                return  # the board shows the copies' own figures
            if self.swap is not None and self.swap.apply(event):
                self._show_swap()
            warm = self.query_one(WarmPanel)
            if warm.wants(event):
                warm.add_metric(event)
            else:
                self.query_one(LatencyPanel).add_metric(event)
        elif isinstance(event, Log):
            self.say(event.message, event.level)
        elif isinstance(event, GateWaiting) and event.kind == "auto":
            self.say(f"checking gate {event.gate} before {event.phase}")
        elif isinstance(event, GateDecided):
            verdict = "passed" if event.ok else "refused"
            self.say(f"gate {event.gate} {verdict} ({event.by}): {event.reason}",
                     "info" if event.ok else "error")
        elif isinstance(event, StepFinished) and event.status in ("failed", "interrupted"):
            self.say(f"step {event.name} {event.status}: {event.error or ''}", "error")
        elif isinstance(event, RunFinished):
            self.say(f"{event.status}: {event.summary}", "info" if event.status in ("done", "rolled_back")
                     else "error")

    def on_gate_asked(self, message: GateAsked) -> None:
        waiting = message.waiting
        if self.gates.pending is not waiting:
            return  # answered already (aborted or the session is closing)
        self.say(f"gate {waiting.gate} waits for the operator: y approves, n declines", "warning")
        verdicts = self.board.automatic_verdicts(waiting.phase)
        self.push_screen(GateModal(waiting, verdicts), callback=self._gate_answered)

    def _gate_answered(self, result: tuple[bool, str] | None) -> None:
        ok, reason = result if result is not None else (False, "declined by operator")
        self.gates.answer(ok, reason)

    def on_run_ended(self, message: RunEnded) -> None:
        self.busy = None
        self._quit_armed_at = None
        if self.stopping:
            self.exit()
            return
        if message.outcome is not None:
            if message.mode == "run" and not self.board.run_id:
                self.board.run_id = message.outcome.run_id
            return
        if message.mode == "run" and self.board.status in ("idle", "running"):
            self.board.status, self.board.summary = "did not start", message.error or ""
            self._show_board()
        self.say(f"{message.mode} did not start: {message.error}", "error")
        if message.hint:
            self.say(f"hint: {message.hint}", "warning")
        self.notify(message.error or "", title=f"{message.mode} did not start", severity="error", timeout=10)

    def on_cluster_sampled(self, message: ClusterSampled) -> None:
        if self.fleet is not None:
            return
        if message.sample is None:
            self.query_one(LagPanel).off(f"cluster sample failed: {message.error}")
            return
        self.query_one(LagPanel).show_sample(message.sample)
        self.query_one(LatencyPanel).add_probe(message.sample.writer, message.sample.latency_ms)

    # ------------------------------------------------------------------ helpers

    def _show_board(self) -> None:
        self.query_one(StepList).show(self.board)
        if self.swap is not None:
            self._show_swap()

    def _show_swap(self) -> None:
        assert self.swap is not None
        self.query_one(SwapTable).show(self.swap)
        line = Text(self.swap.last_step_line() + "\n")
        line.append(self.swap.switchover(), style="bold")
        self.query_one("#swap-switchover", FleetInfo).set(line)

    def say(self, line: str, level: str = "info") -> None:
        """One line in the log pane."""
        style = {"warning": "yellow", "error": "bold red", "debug": "dim"}.get(level, "")
        stamp = self.stamp()
        self.event_log.append(line)
        self.query_one("#log", EventLog).add(Text(f"{stamp} {line}", style=style))
