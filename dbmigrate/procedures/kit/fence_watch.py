"""A watchdog beside the fence: `SET GLOBAL read_only=ON` takes the global read lock, and
while it waits for running statements every new write queues behind it. Two application
transactions waiting on each other's row locks, or one long statement, would stall every
write for the whole lock_wait_timeout (whole seconds, a day by default).

After `block_s` the watchdog looks at what the fence waits for and acts by the playbook's
choice. It looks once before, at `early_s`: a statement the fence waits for that itself waits
for a row lock will not end by itself (the lock's holder, whose next statement or commit
queues behind the fence, cannot go on), so waiting out `block_s` would only hold writes back
longer; when InnoDB counts a row-lock wait then, the watchdog acts at once. The choices:
`unfence` ends the fence statement itself (read_only stays OFF: nothing changed, the run
gives up), `kill_blockers` ends the blocking statements (KILL QUERY: their transactions stay,
their statement fails) and, if the fence is still blocked after another `block_s`, gives up
the same way. It works on a session of its own (the server's watch session, opened before
the fence), from a thread, while the fence statement runs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Literal

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import QueryError
from dbmigrate.db.readers.sessions import LockHolder, Session, SessionReader
from dbmigrate.exceptions import RefusedWait
from dbmigrate.procedures.kit.drain import UNKNOWN_THREAD

OnFenceBlocked = Literal["unfence", "kill_blockers"]

# Watchdogs whose fence returned while their early look was still on the server, by session.
_not_waited_for: dict[int, threading.Thread] = {}

# A fence asked to end is asked again this often until it has returned (see _end_fence).
KILL_AGAIN_S = 0.005


@dataclass
class FenceWatch:
    insp: SessionReader  # on a session other than the fence's
    apply: Applier  # the same other session
    fence_id: int  # the session that sends SET GLOBAL read_only=ON
    block_s: float
    policy: OnFenceBlocked = "unfence"
    log: Callable[..., None] = lambda message, level="info": None
    blockers: list[Session] = field(default_factory=list)
    # Sessions holding a table lock or FTWRL: an idle holder runs no statement, yet the fence waits for it.
    holders: list[LockHolder] = field(default_factory=list)
    holders_note: str = ""  # what the server could not say about them
    killed: list[int] = field(default_factory=list)
    gave_up: bool = False
    error: str = ""
    early_s: float = 0.005  # the early look for blockers that wait on row locks (see above)
    acted_after_s: float | None = None  # when it acted, from the start of the fence
    fence_kills: int = 0  # KILL QUERY sent to the fence (more than one: see _end_fence)
    # What it did when, in ms from the start of the fence: where a blocked fence's time went.
    timeline: dict[str, float] = field(default_factory=dict)
    _done: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _t0: float = 0.0

    def __enter__(self) -> "FenceWatch":
        # An earlier watchdog on this session that was not waited for (see __exit__) ends its
        # read first: one statement at a time on a session.
        earlier = _not_waited_for.pop(id(self.insp.server), None)
        if earlier is not None:
            earlier.join(timeout=5)
        self._t0 = time.monotonic()  # the fence statement follows at once
        self._thread = threading.Thread(target=self._watch, name="fence-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:  # once set, the watchdog sends nothing more
            self._done.set()
            acted = self.acted_after_s is not None
        # One that acted is joined: what it did (gave the fence up, ended statements) decides
        # what the fence's error means. One that did not is not waited for: its early look may
        # still be on the server (a status read can take tens of ms on a saturated server), and
        # the fenced window must not wait for an advisory read. It sends nothing after that
        # read; the next watchdog on the session waits for it.
        if self._thread is None:
            return
        if acted:
            self._thread.join(timeout=5)
        elif self._thread.is_alive():
            _not_waited_for[id(self.insp.server)] = self._thread

    def mark(self, what: str) -> None:
        self.timeline[what] = round((time.monotonic() - self._t0) * 1000, 1)

    def _watch(self) -> None:
        try:
            if not self._wait_for_blockers():
                return
            self.mark("acted")
            if self.policy == "unfence":
                # Writes queue behind the fence: end it first, then read what it waited for
                # (for the operator), so that the stall ends when the watchdog acts.
                self._end_fence()
                self._read_blockers()
                return
            self._read_blockers()
            if self.blockers:
                for s in self.blockers:
                    if self._kill(s.id):
                        self.killed.append(s.id)
                self.mark("blockers ended")
                if self._done.wait(self.block_s):
                    return
            self._end_fence()
        except Exception as exc:  # the server-side lock_wait_timeout still bounds the fence
            self.error = str(exc)

    def _read_blockers(self) -> None:
        self.blockers = self.insp.fence_blockers(self.fence_id)
        self.mark("blockers read")
        try:
            self.holders, self.holders_note = self.insp.lock_holders(self.fence_id)
        except Exception as exc:  # advisory: the refusal still names the running statements
            self.holders_note = f"lock holders not read: {exc}"
        self.mark("lock holders read")

    def _wait_for_blockers(self) -> bool:
        """Wait until the fence should be acted upon: True at block_s, or at early_s when a
        transaction waits on a row lock; False once the fence is done."""
        early = self.early_s if 0 < self.early_s < self.block_s else self.block_s
        if self._done.wait(early):
            return False
        if early < self.block_s:
            # Fences that take longer than early_s are rare: only then is the server asked.
            waits = self._row_lock_waits_now()
            self.mark("early look")
            if not waits and self._done.wait(self.block_s - early):
                return False
        return self._act_unless_done()

    def _act_unless_done(self) -> bool:
        with self._lock:  # __exit__ reads acted_after_s under the same lock
            if self._done.is_set():  # the fence returned meanwhile
                return False
            self.acted_after_s = time.monotonic() - self._t0
            return True

    def _row_lock_waits_now(self) -> bool:
        """The early look: InnoDB's live count of row-lock waits, one cheap read (the sessions are
        read only after the watchdog acted, as at block_s). It is advisory: a failed read counts
        as none, so that the action at block_s still comes."""
        try:
            return self.insp.row_lock_waits() > 0
        except Exception as exc:
            self.error = f"early look: {exc}"
            return False

    def _end_fence(self) -> None:
        """KILL QUERY the fence, again every KILL_AGAIN_S until it has returned. A KILL QUERY that
        reaches a session before the server began its statement is dropped when the statement
        begins (on a starved core that can come ms after it was sent): the fence would then wait
        out its lock_wait_timeout, every write held back (seen once in 120 benchmark rounds)."""
        while self._kill(self.fence_id):
            self.gave_up = True
            self.fence_kills += 1
            self.mark("fence killed" if self.fence_kills == 1 else f"fence killed ({self.fence_kills})")
            if self._done.wait(KILL_AGAIN_S):
                return

    def _kill(self, session_id: int) -> bool:
        with self._lock:
            if self._done.is_set():
                return False
            try:
                self.apply.kill_query(session_id)
            except QueryError as e:
                if e.errno != UNKNOWN_THREAD:
                    raise
            return True

    def said_timeline(self) -> str:
        return ", ".join(f"{what} at {ms:g} ms" for what, ms in sorted(self.timeline.items(), key=lambda kv: kv[1]))

    def refusal(self, server: str) -> RefusedWait:
        """What a run says once this watchdog gave the fence up: nothing changed."""
        waited = self.acted_after_s if self.acted_after_s is not None else self.block_s
        killed = f"; ended {len(self.killed)} of them, still blocked" if self.killed else ""
        return RefusedWait(f"the fence on {server} waited {waited * 1000:.0f} ms behind running statement(s) "
                           f"({self.describe_blockers()}){killed}: gave up, {server} stays writable "
                           f"(read_only=OFF), nothing changed",
                           hint="retry when the application is quieter, or set on_fence_blocked: kill_blockers")

    def describe_blockers(self) -> str:
        held = [h.describe() for h in self.holders[:3]]
        held += [f"+{len(self.holders) - 3} more lock holder(s)"] if len(self.holders) > 3 else []
        held += [self.holders_note] if self.holders_note else []
        if not self.blockers:
            return "; ".join(held) if held else "no running statement seen (commits in progress?)"
        shown = [f"id {s.id} {s.user} {s.time}s {s.state or s.command}{' (row lock wait)' if s.lock_wait else ''}: "
                 f"{(s.info or '').strip()[:60]!r}"
                 for s in self.blockers[:3]]
        more = f" (+{len(self.blockers) - 3} more)" if len(self.blockers) > 3 else ""
        return "; ".join(shown) + more + "".join(f"; {h}" for h in held)
