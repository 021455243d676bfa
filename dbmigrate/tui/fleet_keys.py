"""The consolidation board's part of the session: its keys (throttle, pause, roll one old server
back) and how the board is redrawn. Every action goes through the app's consolidate use cases, as
`dbmigrate consolidate throttle` and `consolidate rollback` do; a key that cannot act says why.
Mixed into CutoverApp, whose state (board, fleet, busy, journal) it reads."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.widgets import DataTable

from dbmigrate.app.consolidate.control import rollback_server, set_throttle
from dbmigrate.app.errors import failure_of
from dbmigrate.app.runs import explain
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.tui.board import RunBoard
from dbmigrate.tui.fleet import FleetBoard
from dbmigrate.tui.messages import ServerRolledBack
from dbmigrate.tui.widgets.fleet import ConfirmModal, FleetDetail, FleetInfo, FleetTable


class FleetKeys:
    FLEET_ACTIONS = ("throttle", "pause", "rollback_server")
    # Provided by CutoverApp.
    fleet: FleetBoard | None
    board: RunBoard
    busy: str | None
    journal_path: Path

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.FLEET_ACTIONS:
            return self.fleet is not None
        return True

    def _why_no_copy_control(self, key: str) -> str | None:
        """Why the copies' pace cannot be changed now (one line), or None when it can."""
        assert self.fleet is not None
        if not self.board.run_id or self.busy != "run":
            return f"{key}: no run in progress: the throttle steers the copies of a running consolidation (g starts it)"
        if not self.fleet.seeding():
            step = self.board.running_step()
            where = f" (running: {step.name})" if step else ""
            return f"{key}: no copy is running now{where}: the throttle paces the seeding copies only"
        return None

    def action_throttle(self, factor: float) -> None:
        fleet = self.fleet
        key = "+" if factor > 1 else "-"
        why = self._why_no_copy_control(key) if fleet is not None else None
        if fleet is None or why:
            self._not_possible(why or f"{key}: only a consolidation has a throttle")
            return
        if fleet.paused:
            self._not_possible(f"{key}: the copies are paused: p resumes them first")
            return
        if factor > 1 and not fleet.cap_mb_s:
            self._not_possible("+: the copies already run without a cap")
            return
        if fleet.cap_mb_s:
            new = round(fleet.cap_mb_s * factor, 2)
        else:  # no cap yet: half of what the fastest copy does now
            fastest = max((r.rate_mb_s or 0.0 for r in fleet.seeding()), default=0.0)
            new = round(max(0.5, fastest * factor), 2)
        self._set_throttle(mb_s=new)

    def action_pause(self) -> None:
        why = self._why_no_copy_control("p") if self.fleet is not None else "p: only a consolidation has copies"
        if why:
            self._not_possible(why)
            return
        assert self.fleet is not None
        self._set_throttle(pause=not self.fleet.paused)

    def _set_throttle(self, *, mb_s: float | None = None, pause: bool | None = None) -> None:
        assert self.fleet is not None
        try:
            done = set_throttle(self.board.run_id, mb_s=mb_s, pause=pause, journal_path=self.journal_path,
                                by="the terminal session")
        except DbmigrateError as exc:
            self._not_possible(f"throttle: {exc.message}")
            return
        self.fleet.cap_mb_s = float(done["throttle_mb_s"] or 0.0) if done["throttle_mb_s"] is not None \
            else self.fleet.cap_mb_s
        self.fleet.paused = bool(done["paused"])
        self.fleet.cap_by = "the operator"
        cap = "no cap" if not self.fleet.cap_mb_s else f"{self.fleet.cap_mb_s:g} MB/s per copy"
        self.say(f"throttle: copies {'paused' if self.fleet.paused else 'running, ' + cap} "
                 f"(as: dbmigrate consolidate throttle {self.board.run_id} "
                 f"{'--pause' if pause else '--resume' if pause is False else f'--mb-s {mb_s:g}'})")
        self._show_fleet()

    def action_rollback_server(self) -> None:
        fleet = self.fleet
        if fleet is None:
            self._not_possible("b: only a consolidation rolls one server back")
            return
        server = self.query_one(FleetTable).selected
        if server is None:
            self._not_possible("b: select an old server first (↑↓ in the table)")
            return
        row = fleet.rows[server]
        if self.busy is not None:
            self._not_possible(f"b: a {self.busy} is in progress: roll {server} back once it has ended "
                               f"(a aborts the run)")
            return
        if not self.board.run_id:
            self._not_possible("b: no run yet: nothing was moved")
            return
        if row.stage != "cut over":
            self._not_possible(f"b: {server} is {row.stage}, not cut over: nothing to roll back")
            return
        others = sum(1 for r in fleet.rows.values() if r.stage == "cut over" and r.name != server)
        body = (f"Route {', '.join(row.shards)} back to {server} once it has applied every write that "
                f"{', '.join(t.name for t in row.targets)} took (through the reverse replication), then make "
                f"{server} writable again. Its instance(s) stay as they are; the other {others} cut-over "
                f"server(s) stay moved. As: dbmigrate consolidate rollback {self.board.run_id} --server {server}")
        self.push_screen(ConfirmModal(f"roll {server} back?", body),
                         callback=lambda yes: self._rollback_server(server) if yes else
                         self.say(f"roll back of {server} cancelled"))

    def _rollback_server(self, server: str) -> None:
        assert self.fleet is not None
        self.busy = "rollback"
        self.fleet.rows[server].stage = "rolling back"
        self._show_fleet()
        self.say(f"rolling {server} back")
        self._drive_rollback_server(server)

    @work(thread=True, exclusive=True, group="engine", name="server-rollback")
    def _drive_rollback_server(self, server: str) -> None:
        try:
            sentence = rollback_server(self.board.run_id, server, subscribers=[self._relay],
                                       journal_path=self.journal_path)
        except Exception as exc:  # shown in one line, never a traceback over the board
            failure = failure_of(exc)
            self.post_message(ServerRolledBack(server, None, failure.message if failure else explain(exc)))
            return
        self.post_message(ServerRolledBack(server, sentence, None))

    def on_server_rolled_back(self, message: ServerRolledBack) -> None:
        self.busy = None
        assert self.fleet is not None
        row = self.fleet.rows[message.server]
        if message.error is not None:
            row.stage = "cut over"
            self.say(f"roll back of {message.server} failed: {message.error}", "error")
            self.notify(message.error, title=f"{message.server} not rolled back", severity="error", timeout=10)
        else:
            row.stage, row.reason = "rolled back", message.sentence or ""
        self._show_fleet()

    def _not_possible(self, why: str) -> None:
        """A key whose action is not possible now says why, in one line."""
        self.say(why, "warning")
        self.notify(why, severity="warning", timeout=6)


    def _show_fleet(self) -> None:
        fleet = self.fleet
        assert fleet is not None
        table = self.query_one(FleetTable)
        table.show(fleet)
        counts = fleet.counts()
        table.border_subtitle = " · ".join(f"{n} {stage}" for stage, n in sorted(counts.items()))
        selected = table.selected or next(iter(fleet.rows), None)
        detail = Text(fleet.detail(selected) if selected else "no old server in the plan")
        self.query_one("#fleet-detail", FleetDetail).set(detail)
        self.query_one("#fleet-throttle", FleetInfo).set(Text("throttle: " + fleet.throttle_line(),
                                                              style="bold yellow" if fleet.paused else ""))
        self.query_one("#fleet-hosts", FleetInfo).set(Text("\n".join(fleet.hosts_lines()), style="dim"))

    def _fleet_tick(self) -> None:
        if self.fleet is not None and self.fleet.tick():
            self._show_fleet()

    def on_data_table_row_highlighted(self, message: DataTable.RowHighlighted) -> None:
        if self.fleet is not None and message.row_key is not None and message.row_key.value in self.fleet.rows:
            self.query_one("#fleet-detail", FleetDetail).set(Text(self.fleet.detail(message.row_key.value)))
