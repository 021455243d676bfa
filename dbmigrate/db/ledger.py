"""The safety ledger: what a process has promised the servers it talks to.

Three records, each with its own module: the fencing generation its decision holds on each server
(db/generation.py), the write-ahead intents it journals before a change is sent (db/intent.py),
and the statements it gave up on, in doubt until their session is known dead (db/in_doubt.py).

Every `Server` handle is given a ledger and reads and writes these through it; the applier and the
guarded role changes use the ledger of the server they are given, and a run arms and disarms the
ledger it is given. One ledger per process is the default: the promises hold for every connection
of the process (a twin session, another step's handle on the same address must see the same doubt
and carry the same generation). Tests give fresh ledgers instead of resetting the process's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dbmigrate.db.generation import Generations
from dbmigrate.db.in_doubt import InDoubtRegistry
from dbmigrate.db.intent import Intents


@dataclass(frozen=True, eq=False)
class SafetyLedger:
    generations: Generations = field(default_factory=Generations)
    intents: Intents = field(default_factory=Intents)
    in_doubt: InDoubtRegistry = field(default_factory=InDoubtRegistry)


# The one process-wide ledger (see above: every connection of the process keeps the same promises).
_PROCESS_LEDGER = SafetyLedger()


def process_ledger() -> SafetyLedger:
    """The ledger every handle, applier and run of this process uses unless given another."""
    return _PROCESS_LEDGER
