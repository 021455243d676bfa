"""Write-ahead intent: the journal knows every change that may still be on the wire.

Before a mutating statement leaves this process, the run's journal records its intent (the
server, the session it goes on (CONNECTION_ID(), known from the handshake: no round trip),
its kind, the fencing generation it carries, its text, redacted); once it is answered, its
outcome. A process killed with a statement in flight leaves an intent without an outcome:
every later process of the cluster's runs (resume, rollback, a new run) loads those as
statements in doubt (db/in_doubt.py) once it holds the cluster lock, and settles each before
it reads or changes that server: the recorded session is ended and seen gone (or, where the
server does not answer, every read of it fails as "may have done it"). The generation bump
(db/generation.py) covers role changes a second way.

Durability: the journal is SQLite in WAL mode with synchronous=NORMAL. A committed write is
in the WAL file, that is in the operating system, before the statement is sent: it survives
kill -9 of the tool (what this guards against) without an fsync inside the fenced window; a
power loss of the tool's own host may lose the last intents, and then the generation bump
alone keeps late role changes harmless. bench/intent_cost.py measures both settings.

Router commands have no session; `record` takes any target (the routing layer passes its
own address and command text) and `done` its outcome.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol


class IntentSink(Protocol):
    """Where intents are kept (the run's journal)."""

    def intent_sent(self, intent: dict[str, Any]) -> int: ...
    def intent_outcome(self, intent_id: int, outcome: str) -> None: ...


_KINDS = (
    (re.compile(r"\bEVENT\b", re.I), "fence expiry"),
    (re.compile(r"read_only\s*=\s*(ON|1)\b", re.I), "fence"),
    (re.compile(r"read_only\s*=\s*(OFF|0)\b", re.I), "open"),
    (re.compile(r"dbmigrate_generation", re.I), "generation"),
    (re.compile(r"\b(MASTER|SLAVE|REPLICA|SOURCE)\b|gtid_slave_pos", re.I), "replication"),
    (re.compile(r"^\s*KILL\b", re.I), "kill"),
)


def kind_of(statement: str) -> str:
    """What a statement does to a server, in a word or two (the journal's `kind`)."""
    for pattern, kind in _KINDS:
        if pattern.search(statement):
            return kind
    words = statement.lstrip().split(None, 2)
    return " ".join(words[:2]).lower() if words else ""


@dataclass
class Intent:
    id: int
    started: float


class Intents:
    """One per process, in its ledger (db/ledger.py); armed while a run holds its cluster lock (as
    the generations are)."""

    def __init__(self) -> None:
        self.sink: IntentSink | None = None
        self._lock = threading.Lock()
        self._doubts: dict[tuple[str, int, str], int] = {}  # (address, session, statement) -> intent id

    @property
    def armed(self) -> bool:
        return self.sink is not None

    def arm(self, sink: IntentSink) -> None:
        self.sink = sink

    def disarm(self) -> None:
        self.sink = None
        self._doubts.clear()

    def record(self, *, server: str, address: str, session_id: int | None, user: str, statement: str,
               generation: int | None, kind: str | None = None) -> Intent | None:
        """Journal an intent before it is sent (None when not armed)."""
        sink = self.sink
        if sink is None:
            return None
        with self._lock:
            intent_id = sink.intent_sent(dict(server=server, address=address, session_id=session_id, user=user,
                                              statement=statement, kind=kind or kind_of(statement),
                                              generation=generation, at=time.time()))
        return Intent(intent_id, time.monotonic())

    def done(self, intent: Intent | None, outcome: str) -> None:
        """Its outcome, once answered. A statement given up on gets none: it stays in doubt."""
        sink = self.sink
        if intent is None or sink is None:
            return
        with self._lock:
            sink.intent_outcome(intent.id, outcome)

    def in_doubt(self, intent_id: int, address: str, session_id: int, statement: str) -> None:
        """The intent's statement is in doubt (given up on here, or left by a dead process): its
        outcome is written once the doubt is settled."""
        self._doubts[(address, session_id, statement)] = intent_id

    def settled(self, address: str, session_id: int, statement: str, said: str) -> None:
        """A doubt was settled (its session ended or gone): the intent gets that outcome."""
        intent_id = self._doubts.pop((address, session_id, statement), None)
        sink = self.sink
        if intent_id is not None and sink is not None:
            with self._lock:
                sink.intent_outcome(intent_id, f"settled: {said}")

