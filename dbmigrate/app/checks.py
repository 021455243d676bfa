"""Preflight checks as a use case: every gate of a promote, read from the servers, nothing changed.

An errant GTID on the candidate (a transaction written there, never on the primary) fails a
gate; the check then reads the candidate's binlog and says what each errant transaction
changed (tables, rows, the statement), so that the operator can decide to keep it (write it on
the primary too) or remove it (replace it by an empty transaction, or rebuild the replica)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dbmigrate.config import load_inventory
from dbmigrate.db.binlog import (BinlogReadError, BinlogReader, BinlogTransaction, errant_floor, errant_matcher,
                                 first_file_holding)
from dbmigrate.db.inspector import Inspector
from dbmigrate.procedures.kit.preflight_checks import GateResult, Limits, run_preflight

__all__ = ["ErrantExplained", "GateResult", "Limits", "explain_errant", "preflight"]

ERRANT_READ_TIMEOUT_S = 30.0  # a whole binlog may be scanned: bounded, and said when it runs out


@dataclass
class ErrantExplained:
    candidate: str
    transactions: list[BinlogTransaction] = field(default_factory=list)
    note: str = ""  # what could not be read, or was not found


def preflight(inventory: Path, cluster: str, candidate: str, limits: Limits) -> list[GateResult]:
    return run_preflight(load_inventory(inventory), cluster, candidate, limits)


def explain_errant(inventory: Path, candidate: str, results: list[GateResult]) -> ErrantExplained | None:
    """What each errant GTID the gates found on `candidate` changed, read from its binlog;
    None when no gate found any."""
    gate = next((r for r in results if r.name == "errant_gtids" and not r.ok and r.details.get("errant")), None)
    if gate is None:
        return None
    errant, source_state = list(gate.details["errant"]), str(gate.details.get("primary_state") or "")
    out = ErrantExplained(candidate)
    with load_inventory(inventory).open(candidate) as server:
        if server.flavor.name != "mariadb":
            out.note = "reading errant transactions from the binlog is implemented for MariaDB only"
            return out
        try:
            # From the newest binlog file that begins before the first errant transaction.
            start = first_file_holding(Inspector(server).binlog_start_states(), errant_floor(errant, source_state))
            out.transactions = BinlogReader(server, ERRANT_READ_TIMEOUT_S).transactions(
                errant_matcher(errant, source_state), start_file=start)
        except BinlogReadError as e:
            out.note = e.message
            return out
    if not out.transactions:
        out.note = f"none of {', '.join(errant)} is in {candidate}'s binlog any more (purged)"
    return out
