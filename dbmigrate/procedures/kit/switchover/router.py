"""4. Router: writes go to the new primary.

A router change is journaled before it is sent and its answer after (`JournaledRouter`). One
sent without an answer is in doubt: the router may still run it (HAProxy keeps a frozen
process's requests in its buffer). Until the router shows it ran or can no longer run, nothing
is read from the router nor sent to it, so that no decision is taken on a route that an older
change may still overwrite; past the wait the run stops with the request that finishes it.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from dbmigrate.clock import Clock
from dbmigrate.db.connection import Server
from dbmigrate.exceptions import SafetyError
from dbmigrate.procedures.kit.switchover.inputs import StepInputs
from dbmigrate.routing.base import RouteIntent, RouterError, RouterGone

SETTLE_POLL_S = 0.2


class WriterRouter(Protocol):
    """What a switchover needs of a router (see dbmigrate.routing.base.Router)."""

    def current(self) -> Any: ...  # RouteState with .writer "host:port"
    def switch_writer(self, new: Server, old: Server | None = None, *, persist: bool = True) -> Any: ...
    def describe_switch(self, new: Server, old: Server | None = None) -> list[str]: ...


class RouteJournal(Protocol):
    """The run's journal of router changes (the cutover's run state)."""

    def pending(self) -> dict[str, Any] | None: ...  # the change sent and not answered, if any
    def last_seq(self) -> int: ...
    def sent(self, change: dict[str, Any]) -> None: ...
    def answered(self, seq: int) -> None: ...


class RouterInDoubt(SafetyError):
    """A router change was sent and the router has not shown that it ran: no route is read
    or changed until it does."""


class JournaledRouter:
    """The run's router (any Router): each change journaled before it is sent, its answer
    after; an earlier change in doubt is settled before any read or change."""

    def __init__(self, router: Any, journal: RouteJournal, clock: Clock, wait_s: float,
                 log: Callable[..., None] | None = None):
        self.router, self.journal, self.clock, self.wait_s = router, journal, clock, wait_s
        self.log = log or (lambda message, level="info": None)

    def __getattr__(self, name: str) -> Any:  # kind, describe, verify, prepare_switch, ...
        return getattr(self.router, name)

    def change_gone(self) -> bool:
        """Is the change in doubt gone with the router's process (nothing listens there now)? Then
        it can never run, and the router counts as not changed by it. Asked once, at once."""
        change = self.journal.pending()
        if change is None:
            return False
        try:
            self.router.settled(int(change["seq"]))
        except RouterGone as e:
            self.journal.answered(int(change["seq"]))
            self.log(f"the router change in doubt ({change['request']}) is gone with the router's process "
                     f"({e.message}): it can no longer run", "warning")
            return True
        except RouterError:
            return False
        return False

    def settle(self) -> None:
        """Wait, up to wait_s, for the change in doubt (if any) to be seen run, or gone with a
        restart of the router; RouterInDoubt past it."""
        change = self.journal.pending()
        if change is None:
            return
        deadline = self.clock.monotonic() + self.wait_s
        last = ""
        while True:
            try:
                if self.router.settled(int(change["seq"])):
                    self.journal.answered(int(change["seq"]))
                    self.log(f"the router change in doubt ({change['request']}) is settled: it ran, or the router "
                             f"restarted since; the route is read from the router", "warning")
                    return
                if self._fenced_off(change):
                    return
                last = "it answers, but has not run it yet"
            except RouterGone:
                if self.change_gone():
                    return
                last = "it does not answer"
            except RouterError as e:
                last = f"it does not answer: {e.message}"
            if self.clock.monotonic() >= deadline:
                raise self._in_doubt(change, last)
            self.clock.sleep(SETTLE_POLL_S)

    def _fenced_off(self, change: dict[str, Any]) -> bool:
        """The change in doubt fenced off where the router can (the relay): a change numbered
        after it, journaled like any, after which the router refuses it. Then the route read
        next is final, whichever way it went, instead of waiting for a sender that may be dead."""
        if not getattr(self.router, "can_fence_off", False):
            return False
        seq = int(change["seq"])
        fence = {"seq": seq + 1, "request": f"seq {seq + 1}", "back": "", "by_hand": change.get("by_hand", "{request}"),
                 "what": f"to fence off the change in doubt ('{change['request']}')"}
        self.journal.sent(fence)
        ran = bool(self.router.fence_off(seq))  # RouterError: the fence is now the change in doubt
        self.journal.answered(seq + 1)
        self.log(f"the router change in doubt ({change['request']}) is fenced off: it "
                 f"{'had run' if ran else 'had not run, and the router now refuses it'}; the route is read "
                 f"from the router", "warning")
        return True

    def _in_doubt(self, change: dict[str, Any], last: str) -> RouterInDoubt:
        intent = RouteIntent(int(change["seq"]), change["request"], change.get("back", ""),
                             change.get("by_hand", "{request}"))
        back = change.get("back")
        what = change.get("what") or f"to send writes to {change.get('to')}"
        undo = "put it back by hand" if change.get("what") else f"send writes back to {change.get('from')} by hand"
        finish = (f"once it answers, {undo}: {intent.finish_by_hand(back)}"
                  if back else f"once it answers, read its route ('show servers state') before any change")
        return RouterInDoubt(
            f"the router change sent to {self.router.describe()} {what} "
            f"('{change['request']}') is in doubt: {last} (waited {self.wait_s:g}s); it may still run, so the route "
            f"is neither read nor changed; {finish}",
            hint="when the router answers again, run the same command again (dbmigrate rollback RUN or "
                 "dbmigrate resume RUN): it waits for the change, reads the route and decides from it")

    def _next_seq(self) -> int:
        return max(int(self.clock.now() * 1000), self.journal.last_seq() + 1)

    def current(self) -> Any:
        self.settle()
        return self.router.current()

    def switch_writer(self, new: Any, old: Any = None, *, persist: bool = True) -> Any:
        self.settle()
        journal = self.journal

        class Log:
            def sent(self, intent: RouteIntent) -> None:
                journal.sent({**intent.to_dict(), "to": getattr(new, "name", str(new)),
                              "from": getattr(old, "name", str(old)) if old is not None else None})

            def answered(self, intent: RouteIntent) -> None:
                journal.answered(intent.seq)

        return self.router.switch_writer(new, old, persist=persist, log=Log(), seq=self._next_seq())

    def send_change(self, cmds: Any, back: Any = (), *, what: str, log: Any = None, seq: Any = None) -> None:
        """Any other change of the route (the hold's maxconn changes, routing/haproxy_hold.py):
        settled, journaled and numbered exactly like the flip. `what` names it in messages."""
        self.settle()
        journal = self.journal

        class Log:
            def sent(self, intent: RouteIntent) -> None:
                journal.sent({**intent.to_dict(), "what": what})

            def answered(self, intent: RouteIntent) -> None:
                journal.answered(intent.seq)

        self.router.send_change(cmds, back, log=Log(), seq=self._next_seq())

    def prepare_switch(self, new: Any, old: Any = None) -> None:
        self.settle()
        self.router.prepare_switch(new, old)

    def describe_switch(self, new: Any, old: Any = None) -> list[str]:
        return list(self.router.describe_switch(new, old))


class RouterFlip:
    """4. The router sends writes to the new primary (none configured: hooks repoint the application)."""

    def __init__(self, on: StepInputs, router: WriterRouter | None):
        self.on, self.router = on, router
        self.old, self.new = on.old, on.new
        self.dry_run, self.record, self.clock = on.dry_run, on.record, on.clock

    def router_points_to(self, name: str) -> bool:
        if self.router is None:
            return True
        host, port = self.on.addr(name)
        writer = self.router.current().writer
        return writer is not None and writer.rsplit(":", 1) == [host, str(port)]

    def switch_router(self, persist: bool = True) -> str:
        """`persist=False`: only the flip; the read-back and the router's copy for restarts
        are `confirm_router`'s, after the fenced window."""
        if self.router is None:
            return "no router configured: applications must be repointed (hooks can do it)"
        if self.dry_run:
            for line in self.router.describe_switch(self.on.server(self.new), self.on.server(self.old)):
                if self.record:
                    self.record("router", line)
            return f"would switch the writer from {self.old} to {self.new}"
        t0 = self.clock.monotonic()
        self.router.switch_writer(self.on.server(self.new), self.on.server(self.old), persist=persist)
        return f"router sends writes to {self.new} (switched in {(self.clock.monotonic() - t0) * 1000:.1f} ms)"

    def confirm_router(self) -> str:
        """After the fenced window: the flip made with persist=False is read back and saved for
        restarts of the router; a router that lost it meanwhile (restarted from its state
        file) is switched again."""
        if self.router is None:
            return "no router configured"
        if self.dry_run:
            return f"would check that the router sends writes to {self.new} only and save that route"
        self.router.switch_writer(self.on.server(self.new), self.on.server(self.old))
        return f"router sends writes to {self.new} only (read back, saved for its restarts)"
