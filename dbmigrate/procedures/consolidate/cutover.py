"""The cutover of one old server as the kit's steps over its instances and routes (kit/target.py):
checks, fence, catch up, bounded check, reverse position journaled, routes, open, reverse connection,
end the old sessions, app login, forward connections; and its undo."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.step import Described, FunctionStep, Step
from dbmigrate.engine.substeps import SubSteps
from dbmigrate.exceptions import DbmigrateError, RefusedWait, SafetyError
from dbmigrate.procedures.consolidate.model import PlannedInstance
from dbmigrate.procedures.consolidate.plan import connection_name
from dbmigrate.procedures.consolidate.resources import CutRecord
from dbmigrate.procedures.consolidate.context import (
    ConsolidateContext,
    ConsolidateError,
    ConsolidateRefused,
    address_of,
    applier_of,
    edit_state,
    is_cut,
    plan_of,
    resources_of,
    route_of,
    server_of,
    shards_of,
    state_of,
    targets_of,
    wild_patterns,
)
from dbmigrate.procedures.consolidate.accounts import (
    Accounts, differences, merge, shard_accounts, try_login, writers_on_instance, writers_that_bypass,
)
from dbmigrate.procedures.consolidate.copy_check import CopyCheck, check_before_fence, check_in_fence
from dbmigrate.procedures.kit.drain import drain, protected_users
from dbmigrate.procedures.kit import target as kit_target
from dbmigrate.procedures.kit.fence import Fence, Fenced, FencedServer, FenceParams
from dbmigrate.procedures.consolidate import relay_edges
from dbmigrate.procedures.consolidate.windows import WINDOWS


def end_app_sessions(ctx: ConsolidateContext, name: str) -> tuple[int, set[str]]:
    """Let in-flight transactions finish (bounded), then end the client sessions (when the
    playbook allows). Returns (sessions ended, the accounts they belonged to)."""
    if ctx.dry_run:
        return 0, set()
    insp = Inspector(server_of(ctx, name))
    done = drain(insp, applier_of(ctx, name), protected_users(insp, resources_of(ctx).repl.user),
                 timeout_s=ctx.params.fence_drain_timeout_s, until="transactions",
                 end=ctx.params.kill_app_sessions, clock=ctx.clock)
    if done.left and not ctx.params.kill_app_sessions:
        ctx.log(f"{len(done.left)} application session(s) stay open on {name} (kill_app_sessions is off): a pool "
                f"that keeps them writes nowhere until it reconnects", "warning")
    return done.ended, {s.user for s in done.left}


def step_prefix(source: str) -> str:
    """Every step of one old server's cutover is named `cut over <source>: <part>`."""
    return f"cut over {source}"


# Parts of consolidation's own, around the kit's: before the fence, and after the sessions.
PRECHECK, LOGIN, FORWARD = "checks before the fence", "app login", "forward connections"
# A failure in these puts the old server back at once (in the lane); one after them leaves it cut
# over (writes flow on the instances) and fails its lane.
UNDONE_IN_PLACE = (kit_target.FENCE, kit_target.CATCH_UP, kit_target.CHECK, kit_target.JOURNAL,
                   kit_target.ROUTES, kit_target.OPEN, kit_target.REVERSE, kit_target.SESSIONS, LOGIN)


class FenceLost(ConsolidateError):
    """A cutover continued by a later process found its old server writable again (its fence
    expired while no process held it): put back and begun again."""


class ServerCutover:
    """One old server's cutover as the kit's steps (a `CutoverTarget`: the old server fenced, its
    instances and their DSN routes taking its shards' writes), with consolidation's own steps
    around them. What one attempt learns (the fence, the copy checks, the window's parts) is kept
    here; what resume and rollback need is journaled in the run state (st.fencing before the
    fence, st.reverse before the open, st.cut once the old server replicates back)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.prefix = step_prefix(source)
        self.accounts: Accounts | None = None
        self.copies: dict[str, CopyCheck] = {}
        self.kit: Fence[tuple[str, int]] | None = None
        self.fenced: Fenced[tuple[str, int]] | None = None
        self.parts: WindowParts | None = None
        self.in_window = False  # this attempt fenced the old server and has not opened (WINDOWS entered)
        self.caught_ms = 0.0
        self.checked = 0
        self.moved: list[str] = []
        self.fenced_ms: float | None = None
        self.killed = 0
        self.seen: set[str] = set()
        self.logged_in = ""
        self.reached = ""
        self.relays: list[relay_edges.Relayed] = []  # the relays of its shards this attempt holds
        self.relayed = False  # every shard writes through a relay: no session of the old server is ended
        self.said: dict[str, str] = {}

    def targets(self, ctx: ConsolidateContext) -> list[PlannedInstance]:
        return targets_of(plan_of(ctx), self.source)

    def mark(self, part: str) -> None:
        if self.parts is not None:
            self.parts.mark(part)

    # -- checks (True: in place, skipped) ------------------------------------------------
    def past_window(self, ctx: ConsolidateContext) -> bool:
        """The fence, catch-up, check and the reverse position are journaled (st.reverse) by an
        earlier process of the run: a resume goes on from the routes."""
        if self.in_window:
            return False  # asked inside this attempt's window: no journal read there
        st = state_of(ctx)
        return self.source in st.reverse or self.source in st.cut

    def routes_done(self, ctx: ConsolidateContext) -> bool:
        if self.in_window:
            return False  # this attempt has not moved them yet: nothing to read inside the window
        plan = plan_of(ctx)
        return all(route_of(ctx, shard).current().writer == address_of(ctx, t.name)
                   for t in self.targets(ctx) for shard in shards_of(plan, t.name, self.source))

    def open_done(self, ctx: ConsolidateContext) -> bool:
        if self.in_window:
            return False
        return all(not Inspector(server_of(ctx, t.name)).read_only() for t in self.targets(ctx))

    def reverse_done(self, ctx: ConsolidateContext) -> bool:
        """The cut record is journaled once every reverse connection runs."""
        return is_cut(ctx, self.source)

    def finished(self, ctx: ConsolidateContext) -> bool:
        return cutover_finished(ctx, self.source)

    # -- consolidation's steps before the fence ------------------------------------------
    def do_prechecks(self, ctx: ConsolidateContext) -> str:
        """Every check the window needs, before anything changes (held while another server is fenced)."""
        WINDOWS.wait_quiet()
        targets = self.targets(ctx)
        relay_edges.relays_of(ctx, self.source, route_of=route_of)  # refused when one relay would have two backends
        self.accounts = require_accounts(ctx, self.source, targets)
        self.copies = verify_copies(ctx, self.source, targets) if ctx.params.checksum else {}
        said = (f"{len(self.accounts.users)} account(s) and {len(self.accounts.roles)} role(s) with grants on the "
                f"shards present on the instance(s)")
        if ctx.params.checksum:
            said = (f"copy verified before the fence ({sum(c.chunks for c in self.copies.values())} range(s), "
                    f"{sum(c.rows for c in self.copies.values())} row(s) equal); {said}")
        return said

    # -- the kit's parts -----------------------------------------------------------------
    def do_fence(self, ctx: ConsolidateContext) -> str:
        WINDOWS.wait_quiet()  # another server's fenced window first
        with edit_state(ctx) as st:  # before anything changes: a crash from here on is found by rollback and resume
            st.fencing[self.source] = ctx.clock.now()
        self.enter_window(ctx)
        # Shards routed through relays: their sessions held at a statement boundary, none busy or
        # in a transaction, before the fence (relay_edges.py): nothing of theirs meets it.
        self.relays = relay_edges.relays_of(ctx, self.source, route_of=route_of)
        held = self.hold(ctx)

        def again(converge_again: Callable[[], None]) -> None:
            # A retried attempt lets writes flow in between (fence_retry_pause_s): released to
            # the old server, unfenced, then held again just before the next attempt.
            relay_edges.release(ctx, self.source)
            converge_again()
            self.hold(ctx)

        try:
            self.kit, self.fenced = fence(ctx, self.source, self.targets(ctx), around_retry=again)
        except BaseException:
            relay_edges.release(ctx, self.source)  # the old server stays the writer: held sessions go on there
            raise
        self.parts = WindowParts(ctx.clock, self.fenced.started)
        self.mark("fence")  # read_only, the final position, and the catch-up budget when there is one
        return f"{held}; {self.fenced.sentence}" if held else self.fenced.sentence

    def hold(self, ctx: ConsolidateContext) -> str:
        return relay_edges.hold(ctx, self.source, self.relays, address_of(ctx, self.source))

    def enter_window(self, ctx: ConsolidateContext) -> None:
        """The fleet's other work waits until this window ends; as in promote's window, nothing
        of the tool's own pauses it (the garbage collector held off, the displays get the steps'
        events when it closes: the journal and the fault matrix's pause at once, the process's
        own CPU priority back)."""
        WINDOWS.enter()
        self.in_window = True
        ctx.hold_for_fenced_window()

    def leave_window(self, ctx: ConsolidateContext) -> None:
        if not self.in_window:
            return
        self.in_window = False
        WINDOWS.leave()
        if not WINDOWS.open_now():  # the last window of the fleet closed
            ctx.release_fenced_window()

    def _fenced(self) -> Fenced[tuple[str, int]]:
        if self.fenced is None:  # the checks keep a resumed attempt from getting here
            raise ConsolidateError(f"{self.source}'s final position is not known to this process: not going on "
                                   f"inside a window it did not open")
        return self.fenced

    def do_catch_up(self, ctx: ConsolidateContext) -> str:
        fenced, p, source = self._fenced(), ctx.params, self.source
        log_file, log_pos = fenced.position
        if not fenced.applied_within_budget:
            for t in self.targets(ctx):
                t_insp = Inspector(server_of(ctx, t.name))
                if not t_insp.wait_for_position(connection_name(source), log_file, log_pos, p.catchup_timeout_s):
                    raise CatchUpTimeout(f"{t.name} did not apply {source}'s final position {log_file}:{log_pos} "
                                         f"within {p.catchup_timeout_s:g}s",
                                         hint=f"check the connection: SHOW SLAVE '{connection_name(source)}' STATUS "
                                              f"on {t.name}; {source} was unfenced")
        self.caught_ms = (ctx.clock.monotonic() - fenced.started) * 1000
        self.mark("catch_up")
        return f"caught up in {self.caught_ms:.0f} ms"

    def do_check(self, ctx: ConsolidateContext) -> str:
        self._fenced()
        self.checked = check_in_window(ctx, self.source, self.targets(ctx), self.copies)
        self.mark("check")
        return f"{self.checked} range(s) compared in the window" if ctx.params.checksum else "no copy check asked"

    def do_journal(self, ctx: ConsolidateContext) -> str:
        # Where each instance's binlog stands while it is still read-only and caught up: what it
        # writes from here on is exactly what it takes once open. Journaled before the open, so
        # that whoever finds this cutover half done (rollback, resume) can replicate it back.
        self._fenced()
        reverse = {t.name: list(Inspector(server_of(ctx, t.name)).binlog_coordinates()) for t in self.targets(ctx)}
        self.mark("reverse_position")
        with edit_state(ctx) as st:
            st.reverse[self.source] = reverse
        self.mark("journal")
        return "reverse position(s) " + ", ".join(f"{n} {f}:{pos}" for n, (f, pos) in reverse.items())

    def require_still_fenced(self, ctx: ConsolidateContext) -> None:
        """A cutover continued by another process: its old server must still be fenced."""
        if not self.in_window and not Inspector(server_of(ctx, self.source)).read_only():
            raise FenceLost(f"{self.source} is writable again (its fence expired while no process held the "
                            f"cutover): putting it back and beginning again")

    def do_routes(self, ctx: ConsolidateContext) -> str:
        # The routes move while both sides are read-only, then the instances open (promote flips
        # its router before the open too): a tool stopped after an open leaves the applications
        # on a writable instance, not on the fenced server.
        self.require_still_fenced(ctx)
        plan, old_addr = plan_of(ctx), address_of(ctx, self.source)
        for t in self.targets(ctx):
            addr = address_of(ctx, t.name)
            for shard in shards_of(plan, t.name, self.source):
                route = route_of(ctx, shard)
                if self.in_window or route.current().writer != addr:  # a resumed attempt moves what is left
                    relay_edges.switch(ctx, route, addr, old_addr)  # a held relay moves its sessions, still held
                self.moved.append(f"{shard}->{t.name}")
        self.mark("routes")
        return f"routes {', '.join(self.moved)}"

    def do_open(self, ctx: ConsolidateContext) -> str:
        p, names = ctx.params, ", ".join(t.name for t in self.targets(ctx))
        self.require_still_fenced(ctx)
        # A resumed attempt holds no fence of its own: the kit's fence of the old server, asked
        # before the open, drops the expiry the earlier process scheduled and sees it still fenced.
        kit = self.kit or server_fence(ctx, self.source, p, names)
        kit.before_open(names)
        self.mark("fence_held")
        for t in self.targets(ctx):
            # Bounded as promote's open: past it the open is in doubt (db/in_doubt.py) and the
            # undo ends its session before it reads or changes the instance.
            with server_of(ctx, t.name).bounded(p.catchup_timeout_s):
                applier_of(ctx, t.name).set_read_only(False)
        if self.fenced is not None:
            self.fenced_ms = (ctx.clock.monotonic() - self.fenced.started) * 1000
        self.mark("open")
        # The instances take writes: the relays' held commands go on there (they moved at the routes).
        released = relay_edges.release(ctx, self.source)
        self.leave_window(ctx)
        if released:
            ctx.log(released)
        if self.fenced_ms is not None:
            ctx.metric("fenced_window_ms", self.fenced_ms, "ms", source=self.source)  # journaled as the window ends
            return f"{names} opened after {self.fenced_ms:.0f} ms fenced"
        return f"{names} opened (the window was begun by an earlier process of the run)"

    def do_reverse(self, ctx: ConsolidateContext) -> str:
        # After the open (three round trips and the relay log's files on the old server, not
        # needed to take writes): the old server replicates back from the journaled positions.
        # A failure here fails the cutover; putting it back sets the connection up again first.
        reverse = state_of(ctx).reverse.get(self.source) or {}
        start_reverse(ctx, self.source, reverse, fresh=self.fenced is not None)
        if self.fenced is None and ctx.params.fence_expiry != "off":
            # Continued from an earlier process, past its open: the expiry that process scheduled
            # (inert since this process's decision) is dropped, not left on the server.
            applier_of(ctx, self.source).cancel_fence_expiry()
        with edit_state(ctx) as st:
            st.cut[self.source] = CutRecord(targets=[t.name for t in self.targets(ctx)], at=ctx.clock.now())
            st.fencing.pop(self.source, None)
        if self.parts is not None:
            self.parts.journal(ctx, self.source)
        record_fence_checks(ctx, self.copies)
        return f"{self.source} replicates them back for rollback"

    def do_sessions(self, ctx: ConsolidateContext) -> str:
        # A hold a process that died past the open left (a resumed run): released now.
        released = relay_edges.release(ctx, self.source)
        released = f"; {released}" if released else ""
        if relay_edges.every_shard_relayed(ctx, self.source, route_of=route_of):
            # Every session that came through a relay was moved by it, with its state: ending one
            # still on the old server (in a transaction the relay moves at its end) would cut it.
            self.relayed = True
            return f"no app session on {self.source} ended: its shards' relays moved them{released}"
        # Only now, with every route naming an instance: a pool that reconnects at once finds the new writer.
        self.killed, self.seen = end_app_sessions(ctx, self.source)
        return f"{self.killed} app session(s) on {self.source} ended{released}"

    # -- consolidation's steps after the sessions ----------------------------------------
    def do_login(self, ctx: ConsolidateContext) -> str:
        WINDOWS.wait_quiet()
        self.logged_in = try_app_login(ctx, self.source, self.targets(ctx), self.accounts)
        return self.logged_in

    def do_forward(self, ctx: ConsolidateContext) -> str:
        WINDOWS.wait_quiet()
        conn = connection_name(self.source)
        for t in self.targets(ctx):  # not needed to open writes, so after the route switch
            # Only where it is still there: a process stopped in this step may have removed some.
            if Inspector(server_of(ctx, t.name)).connection_status(conn) is not None:
                applier_of(ctx, t.name).remove_source(conn)
        self.reached = wait_accounts_reach(ctx, self.source, self.targets(ctx), self.seen)
        with edit_state(ctx) as st:
            rec = st.cut.get(self.source)
            if rec is not None:
                rec.finished = True
        return f"forward connection(s) '{connection_name(self.source)}' dropped{self.reached}"

    def undo(self, ctx: ConsolidateContext) -> str:
        return undo_server(ctx, self.source)

    def describe(self, part: str, ctx: ConsolidateContext) -> list[Described]:
        return describe_part(ctx, self.source, part)

    # -- the steps -------------------------------------------------------------------------
    def steps(self) -> list[Step]:
        def own(part: str, run: Callable[[ConsolidateContext], str], **kw: Any) -> FunctionStep:
            return FunctionStep(kit_target.part_name(self.prefix, part), run,
                                describe=lambda c: self.describe(part, c), **kw)

        return [
            own(PRECHECK, self.do_prechecks, check=self.past_window, mutating=False),
            *kit_target.target_steps(self),
            own(LOGIN, self.do_login, mutating=False),
            own(FORWARD, self.do_forward, check=self.finished, undo=self.undo,
                verify=lambda c: verify_cutover(c, self.source)),
        ]

    def sentence(self, ctx: ConsolidateContext) -> str:
        p = ctx.params
        said_check = (f"copy verified before the fence ({sum(c.chunks for c in self.copies.values())} range(s), "
                      f"{sum(c.rows for c in self.copies.values())} row(s) equal), {self.checked} range(s) compared "
                      f"in it; " if p.checksum and self.copies else "")
        fenced = f"{self.fenced.sentence}; caught up in {self.caught_ms:.0f} ms; " if self.fenced is not None else \
            "continued from its journaled reverse position; "
        window = f"after {self.fenced_ms:.0f} ms fenced" if self.fenced_ms is not None else "(opened earlier)"
        accounts = (f"{len(self.accounts.users)} account(s) and {len(self.accounts.roles)} role(s) with grants on "
                    f"the shards present on the instance(s); " if self.accounts is not None else "")
        ended = (f"the relays moved the app sessions (none ended on {self.source})" if self.relayed else
                 f"{self.killed} app session(s) on {self.source} ended")
        return (f"{said_check}{fenced}routes {', '.join(self.moved) or '(moved earlier)'} {window}; then "
                f"{ended}; {self.logged_in}{self.reached}; {accounts}"
                f"{self.source} replicates them back for rollback")


def server_steps(source: str) -> list[Step]:
    """One old server's cutover steps (as the procedure declares them: names, undo, describe)."""
    return ServerCutover(source).steps()


def cutover_finished(ctx: ConsolidateContext, source: str) -> bool:
    """Every step of the old server's cutover ran (the fleet skips it on resume)."""
    rec = state_of(ctx).cut.get(source)
    return rec is not None and rec.finished


def undo_server(ctx: ConsolidateContext, source: str) -> str:
    """The undo of every step of one old server's cutover: the whole cutover put back, when the
    run state says one began (st.fencing) or ended (st.cut); else nothing (undone already, by an
    earlier step's undo or the per-server rollback)."""
    st = state_of(ctx)
    if source not in st.fencing and source not in st.cut:
        return f"nothing left to undo of {source}'s cutover"
    return undo_cutover(ctx, source)


def cutover(ctx: ConsolidateContext, source: str) -> str:
    """Move one old server's shards to their instances, in the order that keeps every
    application writing somewhere, as the kit's steps (kit/target.py), each journaled as a step of
    its own under the fleet's step: (before the fence) the accounts and the copy checked ->
    fence (kit fence: calm wait, watchdog, fenced catch-up budget) -> each instance applies the
    final position -> the ranges that kept changing compared -> each instance's binlog position
    journaled -> routes switched -> the instances opened -> (outside the window) the old server
    replicates back from those positions (reverse connections) -> the application's sessions on
    the old server ended, so that pools reconnect through the new route -> every account that
    writes the shards can write there, the app account logs in there -> forward connections
    dropped. A step that finds its part in place (a resumed run) is skipped. A failure up to the
    app login puts this old server back at once; one begun by a process that stopped before
    journaling the reverse position is put back before beginning again."""
    targets = targets_of(plan_of(ctx), source)
    if ctx.dry_run:
        return f"would fence {source} and route its shards to {', '.join(t.name for t in targets)}"
    st = state_of(ctx)
    if source in st.fencing and source not in st.reverse:  # an earlier attempt stopped inside its window
        ctx.log(f"the cutover of {source} began earlier in this run and did not finish (it stopped before its "
                f"reverse position was journaled): putting it back before starting again: "
                f"{undo_cutover(ctx, source)}", "warning")
    elif source in st.reverse and not cutover_finished(ctx, source):
        ctx.log(f"the cutover of {source} began earlier in this run and did not finish: going on from its journaled "
                f"reverse position, each step asked first whether it is in place", "warning")
    for attempt in (1, 2):
        run = ServerCutover(source)
        steps = SubSteps(ctx, run.steps())
        try:
            steps.run()
            return run.sentence(ctx)
        except BaseException as exc:
            failed = steps.failed
            in_place = failed is not None and failed.name.rpartition(": ")[2] in UNDONE_IN_PLACE
            undone = False
            try:
                if in_place:
                    ctx.log(f"cutover of {source} failed: {undo_cutover(ctx, source)}", "warning")
                    undone = True
            except Exception as undo_exc:  # keep the original error; say what is left to do
                ctx.log(f"putting {source} back failed too: {undo_exc}; run: dbmigrate rollback {ctx.run_id}",
                        "error")
            finally:
                run.leave_window(ctx)  # put back (or not) at full speed: its applications wait on it
            if undone and isinstance(exc, FenceLost) and attempt == 1:
                ctx.log(exc.message, "warning")
                continue
            if undone and isinstance(exc, (CatchUpTimeout, RefusedWait)):  # undone in place: as it was
                raise ConsolidateRefused(f"{exc.message}: {source} was unfenced, nothing changed",
                                         hint=exc.hint) from None
            raise
    raise AssertionError("unreachable")  # the loop returns or raises


BUDGET_POLL_S = 0.002


def start_reverse(ctx: ConsolidateContext, source: str, reverse: dict[str, list[Any]], *, fresh: bool) -> None:
    """The old server replicates, on a named connection per instance, what each instance wrote
    after its position in `reverse` (filtered to the shards it took from this server). `fresh`:
    the cutover sets the connections up anew; else (putting a half-done cutover back) a
    connection already there is started if it is not running, and a missing one set up."""
    plan = plan_of(ctx)
    a = applier_of(ctx, source)
    src = Inspector(server_of(ctx, source))
    for name, (t_file, t_pos) in reverse.items():
        conn = connection_name(name)
        running = None if fresh else src.connection_running(conn)
        if running is None:
            host, _, port = address_of(ctx, name).rpartition(":")
            a.add_source(conn, host, int(port), resources_of(ctx).repl, t_file, int(t_pos),
                         wild_patterns(shards_of(plan, name, source)))
        if not running:
            a.start_source(conn)


class WindowParts:
    """Where one fenced window's time went, part by part (from the fence's start), journaled
    after the window as `fenced_part_ms` metrics: inside it the journal is not free."""

    def __init__(self, clock: Any, started: float) -> None:
        self.clock, self.last = clock, started
        self.parts: list[tuple[str, float]] = []

    def mark(self, part: str) -> None:
        now = self.clock.monotonic()
        self.parts.append((part, (now - self.last) * 1000))
        self.last = now

    def journal(self, ctx: ConsolidateContext, source: str) -> None:
        for part, ms in self.parts:
            ctx.metric("fenced_part_ms", round(ms, 2), "ms", source=source, part=part)


class CatchUpTimeout(ConsolidateError):
    """An instance did not apply the fenced server's final position in time."""


def fence(ctx: ConsolidateContext, source: str, targets: list[PlannedInstance],
          around_retry: Callable[[Callable[[], None]], None] | None = None,
          ) -> tuple[Fence[tuple[str, int]], Fenced[tuple[str, int]]]:
    """The kit fence on the old server (calm wait, watchdog with its timeline, fenced catch-up
    budget and attempts); its final position is a binlog (file, pos): replication here is by
    file and position on named connections. `around_retry(converge)`: what runs before a retried
    attempt, around the convergence again (the relays' release and hold)."""
    p, plan = ctx.params, plan_of(ctx)

    def applied_within(pos: tuple[str, int], budget_s: float) -> bool:
        # Polled: the server's own wait takes whole seconds, and the budget is a fraction of one.
        deadline = ctx.clock.monotonic() + budget_s
        waiting = {t.name: Inspector(server_of(ctx, t.name)) for t in targets}
        while True:
            waiting = {n: i for n, i in waiting.items() if not i.applied_through(connection_name(source), *pos)}
            if not waiting:
                return True
            if ctx.clock.monotonic() >= deadline:
                return False
            ctx.clock.sleep(BUDGET_POLL_S)

    def converge_again() -> None:
        from dbmigrate.procedures.consolidate.readiness import source_caught_up

        ok, reason, _ = source_caught_up(ctx, p, source)
        if not ok:
            raise ConsolidateRefused(f"not fenced again: {reason}", hint="nothing changed on it; resume once it keeps up")

    del plan
    kit = server_fence(ctx, source, p, ", ".join(t.name for t in targets))
    retry = converge_again if around_retry is None else (lambda: around_retry(converge_again))
    return kit, kit.fence(applied_within=applied_within, before_retry=retry)


def server_fence(ctx: ConsolidateContext, name: str, params: FenceParams, targets: str) -> Fence[tuple[str, int]]:
    """The kit fence of one server of the run (an old server, or an instance the undo takes
    writes from); its final position is a binlog (file, pos)."""
    at = replace(FencedServer.of(server_of(ctx, name)), inspector=lambda: Inspector(server_of(ctx, name)),
                 applier=lambda: applier_of(ctx, name))
    return Fence(name, at, params, final_position=lambda insp, read: insp.binlog_coordinates(),
                 catchup_timeout_s=ctx.params.catchup_timeout_s, targets=targets, log=ctx.log, clock=ctx.clock,
                 dry_run=ctx.dry_run)


def instance_fence(ctx: ConsolidateContext, name: str, source: str) -> Fence[tuple[str, int]]:
    """The kit fence of an instance whose writes go back to `source`: bounded, watched, and
    expiring by itself where its event scheduler runs (a rollback is not refused for want of
    the expiry: it warns). Its expiry is dropped before `source` opens (`keep_closed`)."""
    p = ctx.params
    fence_params = p.model_copy(update={"fence_expiry": "if_available"}) if p.fence_expiry == "require" else p
    return server_fence(ctx, name, fence_params, source)


def keep_closed(ctx: ConsolidateContext, name: str, source: str) -> None:
    """Before `source` takes writes again: the instance, which no shard routes to, is read-only
    with no fence expiry left (a cutover may have stopped after opening it: a writable one is
    fenced with the kit's fence first)."""
    held = instance_fence(ctx, name, source)
    if not Inspector(server_of(ctx, name)).read_only():
        held.fence()
    held.before_open(source)


def routed_to(ctx: ConsolidateContext, inst: PlannedInstance) -> list[str]:
    """The instance's shards (of every old server) whose route names it."""
    return [s for s in inst.shards if route_of(ctx, s).current().writer == address_of(ctx, inst.name)]


def require_accounts(ctx: ConsolidateContext, source: str, targets: list[PlannedInstance]) -> Accounts:
    """Before the fence: every account with a privilege on the moved shards exists on its
    instance, authenticates the same and holds the same grants there, and every one that writes
    them is stopped by read_only on the old server; else nothing is fenced."""
    plan, p = plan_of(ctx), ctx.params
    src = Inspector(server_of(ctx, source))
    exclude = {src.login_user, resources_of(ctx).repl.user}
    everyone = Accounts()
    problems = []
    for t in targets:
        shards = shards_of(plan, t.name, source)
        accounts = shard_accounts(src, shards, include_global=p.seed.global_grants, exclude=exclude)
        merge(everyone, accounts)
        problems += differences(src, Inspector(server_of(ctx, t.name)), accounts, shards)
    if everyone.writers or everyone.role_writers:
        problems += writers_that_bypass(everyone, src.read_only_bypass_users(), source)
    if problems:
        raise ConsolidateRefused(f"not fenced: the application's accounts would not work on the instance: "
                                 f"{'; '.join(problems)}",
                                 hint="nothing changed; copy the accounts and grants (a logical seed does), then resume")
    return everyone


def verify_copies(ctx: ConsolidateContext, source: str, targets: list[PlannedInstance]) -> dict[str, CopyCheck]:
    """Before the fence, while replicating: each instance's copy compared range by range."""
    plan, p = plan_of(ctx), ctx.params
    src = Inspector(server_of(ctx, source))
    found = {}
    for t in targets:
        shards = shards_of(plan, t.name, source)
        found[t.name] = check_before_fence(src, Inspector(server_of(ctx, t.name)), connection_name(source), shards,
                                           chunk_bytes=int(p.check_chunk_mb * 1024 * 1024),
                                           wait_s=min(p.catchup_timeout_s, 5.0), between=WINDOWS.wait_quiet)
    left = [c for f in found.values() for c in f.unsettled]
    save_checksums(ctx, {**state_of(ctx).checksums,
                         **{shard: {"old": dict(f.equal.get(shard, {})), "new": dict(f.equal.get(shard, {})),
                                    "left_for_fence": [c.describe() for c in left if c.shard == shard]}
                            for f in found.values() for shard in f.tables}})
    if len(left) > p.fenced_check_max_chunks:
        raise ConsolidateRefused(f"not fenced: {len(left)} range(s) of {source}'s shards kept changing while they "
                                 f"were compared (limit {p.fenced_check_max_chunks} inside the fence), e.g. "
                                 f"{', '.join(c.describe() for c in left[:3])}",
                                 hint="nothing changed; resume when the writes are lighter, or raise "
                                      "fenced_check_max_chunks (each costs time inside the fence)")
    return found


def check_in_window(ctx: ConsolidateContext, source: str, targets: list[PlannedInstance], copies: dict[str, CopyCheck]) -> int:
    """Inside the fence: the ranges left by the check before it, compared exactly (bounded by
    fenced_check_max_chunks, whatever the shard's size)."""
    if not ctx.params.checksum:
        return 0
    plan = plan_of(ctx)
    src = Inspector(server_of(ctx, source))
    n = 0
    for t in targets:
        shards = shards_of(plan, t.name, source)
        k, diffs = check_in_fence(src, Inspector(server_of(ctx, t.name)), source, t.name, copies[t.name], shards)
        n += k
        if diffs:
            save_checksums(ctx, {**state_of(ctx).checksums, **{s: {"differs": d} for s, d in diffs.items()}})
            raise SafetyError(f"the copy on {t.name} differs from {source}: "
                              + "; ".join(f"{r} ({v})" for d in diffs.values() for r, v in d.items()),
                              hint=f"{source} was unfenced; compare the tables, then re-seed the instance")
    return n


def record_fence_checks(ctx: ConsolidateContext, copies: dict[str, CopyCheck]) -> None:
    """Journal the ranges compared inside the window (after it: the journal is not free)."""
    sums = dict(state_of(ctx).checksums)
    for c in (c for f in copies.values() for c in f.unsettled):
        entry = sums.setdefault(c.shard, {"old": {}, "new": {}})
        for side in ("old", "new"):
            entry[side][c.table] = entry[side].get(c.table, 0) + 1
        entry["in_fence"] = entry.get("in_fence", 0) + 1
    save_checksums(ctx, sums)


def try_app_login(ctx: ConsolidateContext, source: str, targets: list[PlannedInstance], accounts: Accounts | None = None) -> str:
    """After the switch: every account that writes the moved shards holds its write grants on
    the instance, which takes writes (read as the tool: their passwords are not ours), and the
    inventory's app account logs in where each route now points, finds it writable and reaches
    its shards' tables."""
    plan = plan_of(ctx)
    said = []
    if accounts is not None and accounts.writers:
        able, problems = [], []
        for t in targets:
            ok, bad = writers_on_instance(Inspector(server_of(ctx, t.name)), accounts, shards_of(plan, t.name, source))
            able += [f"{who} on {t.name}" for who in ok]
            problems += bad
        if problems:
            raise SafetyError(f"the application's accounts cannot write on the instance(s): {'; '.join(problems)}",
                              hint=f"fix those accounts' grants on the instance(s); {source} was put back")
        said.append(f"every account that writes the shards can write there ({', '.join(able)})")
    app = resources_of(ctx).app
    if app is None:
        return "; ".join(said + ["no app account in the inventory to log in with"])
    for t in targets:
        shards = shards_of(plan, t.name, source)
        # A route with no writer yet (every server fenced): log in at the instance itself.
        writer = (route_of(ctx, shards[0]).current().writer if shards else None) or address_of(ctx, t.name)
        try:
            said.append(try_login(f"{t.name} as {app.user}", writer, app, shards))
        except DbmigrateError as e:
            raise SafetyError(f"the application account {app.user} cannot work on {t.name}: {e.message}",
                              hint=f"fix its account or grants on {t.name}; {source} was put back") from None
    return "; ".join(said)


def wait_accounts_reach(ctx: ConsolidateContext, source: str, targets: list[PlannedInstance], seen: set[str]) -> str:
    """After the switch (bounded, outside the window): every account that had sessions on the
    old server has one on an instance. A warning past the bound: an idle pool may come later."""
    if not seen:
        return ""
    bound = ctx.params.app_reach_timeout_s
    deadline = ctx.clock.monotonic() + bound
    missing = set(seen)
    while True:
        WINDOWS.wait_quiet()
        for t in targets:
            missing -= {s.user for s in Inspector(server_of(ctx, t.name)).sessions()}
        if not missing or ctx.clock.monotonic() >= deadline:
            break
        ctx.clock.sleep(0.05)
    if missing:
        ctx.log(f"no session of {', '.join(sorted(missing))} reached {', '.join(t.name for t in targets)} within "
                f"{bound:g}s of the switch: check those applications' connection settings", "warning")
        return f"; NOT yet seen on the instance(s): {', '.join(sorted(missing))}"
    return f"; every account seen on {source} ({', '.join(sorted(seen))}) reconnected to the instance(s)"


def save_checksums(ctx: ConsolidateContext, results: dict[str, Any]) -> None:
    with edit_state(ctx) as st:
        st.checksums = results


def undo_cutover(ctx: ConsolidateContext, source: str) -> str:
    """Route the source's shards back after it applied every write its instances took.

    Also puts back a cutover that stopped part way (the tool killed in it): fenced only, a
    reverse connection set up but not journaled, an instance opened before any route moved,
    routes moved or the instance opened before the reverse connection was set up or started.
    Shards routed through relays: held before the instance's fence, moved back held, released
    once the old server takes writes; a hold a process that died left is released then too."""
    try:
        said = _undo_cutover(ctx, source)
    except BaseException:
        relay_edges.release(ctx, source)  # nothing is held past a failed undo: the relay's backend goes on
        raise
    return said


def _undo_cutover(ctx: ConsolidateContext, source: str) -> str:
    plan, p = plan_of(ctx), ctx.params
    targets = targets_of(plan, source)
    old_addr = address_of(ctx, source)
    reverse = state_of(ctx).reverse.get(source) or {}
    src = Inspector(server_of(ctx, source))
    back = []
    for t in targets:
        shards = shards_of(plan, t.name, source)
        routed_here = [s for s in shards if route_of(ctx, s).current().writer == address_of(ctx, t.name)]
        conn = connection_name(t.name)
        held: Fence[tuple[str, int]] | None = None  # the instance's fence set here
        if t.name in reverse and routed_here and not src.connection_running(conn):
            # Stopped after the routes moved (and perhaps the open), before the old server
            # replicated back: from the journaled position, which the instance wrote nothing
            # after before it opened, so every write it took is replayed before the routes move back.
            start_reverse(ctx, source, {t.name: reverse[t.name]}, fresh=False)
        if t.name in reverse and src.connection_status(conn) is not None:
            if routed_here:
                # Its relays first hold their sessions (none busy or in a transaction), so that
                # nothing of theirs meets the instance's fence (relay_edges.py).
                holding = relay_edges.hold(ctx, source, relay_edges.relays_of(ctx, source, t.name, route_of),
                                           address_of(ctx, t.name))
                if holding:
                    ctx.log(holding)
                # Fences every shard on the instance for a moment (the kit's fence); rollback
                # undoes newest first, so the others move back right after or are reopened below.
                held = instance_fence(ctx, t.name, source)
                t_file, t_pos = held.fence().position
            else:
                t_file, t_pos = Inspector(server_of(ctx, t.name)).binlog_coordinates()
            if not src.wait_for_position(conn, t_file, t_pos, p.catchup_timeout_s):
                raise ConsolidateError(f"{source} did not apply {t.name}'s writes up to {t_file}:{t_pos} "
                                       f"within {p.catchup_timeout_s:g}s; the routes still point at {t.name}",
                                       hint=f"check SHOW SLAVE '{conn}' STATUS on {source}, then: dbmigrate rollback RUN")
            for s in routed_here:
                # A held relay moves its sessions back, still held until the old server opens.
                relay_edges.switch(ctx, route_of(ctx, s), old_addr, address_of(ctx, t.name))
                back.append(s)
            if held is not None and not routed_to(ctx, t):
                # No route names the instance now: it stays read-only, its fence no longer expires.
                held.before_open(source)
            if routed_here and not relay_edges.every_shard_relayed(ctx, source, routed_here, route_of):
                # After the routes name the old server again: pools reconnect there. Not through
                # relays: they moved their sessions back.
                end_app_sessions(ctx, t.name)
            applier_of(ctx, source).remove_source(conn)
        elif routed_here:
            raise SafetyError(f"{', '.join(routed_here)} route to {t.name} but {source} has no reverse connection: "
                              "routing back would lose the writes made there", hint="copy them back by hand first")
        elif src.connection_status(conn) is not None:
            # Set up by a cutover that stopped before journaling it: no route had moved, so the
            # instance took no writes and there is nothing to wait for.
            applier_of(ctx, source).remove_source(conn)
        # Before the old server takes writes again: an instance no shard routes to is read-only.
        if routed_to(ctx, t):
            if held is not None:
                held.unfence()  # the shards of its other old servers write there again
            else:
                applier_of(ctx, t.name).set_read_only(False)
        elif held is None:
            keep_closed(ctx, t.name, source)
    if p.fence_expiry != "off":  # a fence this run set may have scheduled its expiry
        applier_of(ctx, source).cancel_fence_expiry()
    applier_of(ctx, source).set_read_only(False)
    # It takes writes again: the relays' held commands go on there (this process's holds, or
    # ones a process that died left).
    released = relay_edges.release(ctx, source)
    verify_undone(ctx, source)
    with edit_state(ctx) as st:
        st.reverse.pop(source, None)
        st.cut.pop(source, None)
        st.fencing.pop(source, None)
    routed = f"routes {', '.join(back)} back to {source}" if back else "no route had moved"
    return f"{routed}; {source} is writable again" + (f"; {released}" if released else "")


def verify_undone(ctx: ConsolidateContext, source: str) -> None:
    """Postcondition of an undone cutover, read on the servers and routes (not the journal's
    word): the old server is writable and every one of its shards routes to it."""
    if ctx.dry_run:
        return
    plan = plan_of(ctx)
    wrong = [f"{shard} routes to {writer}" for t in targets_of(plan, source) for shard in shards_of(plan, t.name, source)
             if (writer := route_of(ctx, shard).current().writer) != address_of(ctx, source)]
    if Inspector(server_of(ctx, source)).read_only():
        wrong.append(f"{source} is read-only")
    if wrong:
        raise SafetyError(f"after putting {source} back: " + "; ".join(wrong),
                          hint="fix the routes by hand (the old server holds every write), then: dbmigrate rollback RUN")


def verify_cutover(ctx: ConsolidateContext, source: str) -> None:
    """Postcondition of one old server's cutover: its shards route to writable instances; it is fenced."""
    if ctx.dry_run:
        return
    plan = plan_of(ctx)
    wrong = []
    for t in targets_of(plan, source):
        for shard in shards_of(plan, t.name, source):
            writer = route_of(ctx, shard).current().writer
            if writer != address_of(ctx, t.name):
                wrong.append(f"{shard} routes to {writer}")
        if Inspector(server_of(ctx, t.name)).read_only():
            wrong.append(f"{t.name} is read-only")
    if not Inspector(server_of(ctx, source)).read_only():
        wrong.append(f"{source} is writable")
    if wrong:
        raise SafetyError(f"after the cutover of {source}: " + "; ".join(wrong))


def describe_part(ctx: ConsolidateContext, source: str, part: str) -> list[Described]:
    """What one step of a server's cutover would send (a dry run), as (server, statement) pairs."""
    p = ctx.params
    targets = [t.name for t in targets_of(plan_of(ctx), source)]
    conn = connection_name(source)
    lines: dict[str, list[Described]] = {
        PRECHECK: [(source, "accounts with grants on the shards compared with each instance"),
                   *[(t, f"chunked checksums of every table of its shards against {source}, each after "
                         f"MASTER_POS_WAIT(<{source}'s position>, '{conn}')") for t in targets if p.checksum]],
        kit_target.FENCE: [(source, f"{p.described()}; SHOW MASTER STATUS")],
        kit_target.CATCH_UP: [(t, f"SELECT MASTER_POS_WAIT(<final file>, <final pos>, {p.catchup_timeout_s:g}, "
                                  f"'{conn}')") for t in targets],
        kit_target.CHECK: [(t, "the ranges that kept changing compared again") for t in targets if p.checksum],
        kit_target.JOURNAL: [(t, "its binlog position read and journaled (where the reverse connection will "
                                 "start)") for t in targets],
        kit_target.ROUTES: [("routes", f"DSN file: each shard of {source} -> its instance (both sides still "
                                       f"read-only); a relay that holds its sessions: move INSTANCE (released at "
                                       f"the open)")],
        kit_target.OPEN: [(source, "the fence's expiry dropped, read_only read back (still fenced)"),
                          *[(t, f"read_only=OFF (bounded by {p.catchup_timeout_s:g}s): takes the shards' writes")
                            for t in targets]],
        kit_target.REVERSE: [(source, f"CHANGE MASTER '{connection_name(t)}' TO <{t}'s journaled position> "
                                      f"(reverse, for rollback); START SLAVE '{connection_name(t)}'")
                             for t in targets],
        kit_target.SESSIONS: [(source, "KILL CONNECTION <app sessions> (after the routes moved: pools reconnect "
                                       "to the instance); none when every shard routes through a relay (moved)")],
        LOGIN: [(t, "the app account logs in and reaches its tables") for t in targets],
        FORWARD: [(t, f"stop and remove replication connection '{conn}'") for t in targets],
    }
    return lines.get(part, [])


def rollback_one(ctx: ConsolidateContext, source: str) -> str:
    """Put one old server back (its shards' routes, writable) while the others stay moved.
    The run's cutover step then counts it as not done: `dbmigrate resume RUN` would move it again."""
    if source not in {s.source for s in plan_of(ctx).shards}:
        from dbmigrate.exceptions import UsageError

        raise UsageError(f"{source} is not an old server of this run's plan",
                         hint="old servers: " + ", ".join(sorted({s.source for s in plan_of(ctx).shards})))
    if not is_cut(ctx, source) and source not in state_of(ctx).fencing:
        raise ConsolidateError(f"{source} is not cut over in run {ctx.run_id}: nothing to roll back")
    sentence = undo_cutover(ctx, source)
    with edit_state(ctx) as st:
        st.servers[source] = {"stage": "rollback", "status": "done", "text": sentence, "s": 0, "at": ctx.clock.now()}
    ctx.metric("fleet_server_s", 0, "s", server=source, stage="rollback", status="done", text=sentence)
    return f"{source} rolled back: {sentence}"
