"""One cutover as a list of kit steps over a target.

A `CutoverTarget` is what one cutover moves writes between: the server fenced and what takes
its writes (consolidation: one old server, its N instances and their DSN routes). The kit
orders its parts the same way for every target:

  fence -> catch up -> check -> journal the reverse position -> routes -> open -> reverse -> sessions

Each part is an engine step named `<prefix>: <part>`, so that the journal records each one,
the fault matrix pauses between them, `resume` asks each one's check, and `rollback` undoes
each one (every part's undo is the target's: it puts the whole cutover back from whatever it
finds, and says so once; the others then find nothing left). A target adds steps of its own
before the fence and after the sessions (consolidation: its account and copy checks, the
application's login, its forward connections).

The fenced window runs from the fence step to the open step, inside one process: the parts
between them ask their checks without a round trip while the target's own attempt holds the
window (a part it has not done yet is not done), and only the journal step writes the run
state there (the reverse position, before the open).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from dbmigrate.engine.step import Described, FunctionStep, RunContext, Step

Ctx = RunContext[Any, Any]

# The parts, in order; each target names its steps `<prefix>: <part>`.
FENCE, CATCH_UP, CHECK, JOURNAL, ROUTES, OPEN, REVERSE, SESSIONS = (
    "fence", "catch up", "check in the window", "journal the reverse position", "routes", "open",
    "reverse replication", "end sessions")
PARTS = (FENCE, CATCH_UP, CHECK, JOURNAL, ROUTES, OPEN, REVERSE, SESSIONS)


class CutoverTarget(Protocol):
    """What the kit's cutover steps drive. Each `do_*` returns its sentence; each `*_done` is that
    part's check (True: already in place, skip); `undo` puts the whole cutover back."""

    prefix: str  # the steps' names begin with it

    def do_fence(self, ctx: Ctx) -> str: ...
    def do_catch_up(self, ctx: Ctx) -> str: ...
    def do_check(self, ctx: Ctx) -> str: ...
    def do_journal(self, ctx: Ctx) -> str: ...
    def do_routes(self, ctx: Ctx) -> str: ...
    def do_open(self, ctx: Ctx) -> str: ...
    def do_reverse(self, ctx: Ctx) -> str: ...
    def do_sessions(self, ctx: Ctx) -> str: ...

    def past_window(self, ctx: Ctx) -> bool: ...  # fence, catch up, check and journal done
    def routes_done(self, ctx: Ctx) -> bool: ...
    def open_done(self, ctx: Ctx) -> bool: ...
    def reverse_done(self, ctx: Ctx) -> bool: ...

    def undo(self, ctx: Ctx) -> str: ...
    def describe(self, part: str, ctx: Ctx) -> Sequence[Described]: ...


def part_name(prefix: str, part: str) -> str:
    return f"{prefix}: {part}"


def target_steps(t: CutoverTarget) -> list[Step]:
    """The kit's steps over `t`, in the kit's order (see the module doc)."""

    def step(part: str, run: Callable[[Ctx], str], *, check: Callable[[Ctx], bool] | None,
             mutating: bool = True) -> FunctionStep:
        # Every part that changes something is undone even when it stopped half way (killed):
        # the target's undo reads what is in place.
        return FunctionStep(part_name(t.prefix, part), run, check=check, mutating=mutating,
                            undo=t.undo if mutating else None, undo_if_started=mutating,
                            describe=lambda c: t.describe(part, c))

    return [
        step(FENCE, t.do_fence, check=t.past_window),
        step(CATCH_UP, t.do_catch_up, check=t.past_window, mutating=False),
        step(CHECK, t.do_check, check=t.past_window, mutating=False),
        step(JOURNAL, t.do_journal, check=t.past_window),
        step(ROUTES, t.do_routes, check=t.routes_done),
        step(OPEN, t.do_open, check=t.open_done),
        step(REVERSE, t.do_reverse, check=t.reverse_done),
        # No check: ending the sessions left on the fenced server again is harmless.
        step(SESSIONS, t.do_sessions, check=None),
    ]
