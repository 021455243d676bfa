"""Preflight checks as a use case: every gate of a promote, read from the servers, nothing changed."""

from __future__ import annotations

from pathlib import Path

from dbmigrate.config import load_inventory
from dbmigrate.gates import GateResult, Limits, run_preflight

__all__ = ["GateResult", "Limits", "preflight"]


def preflight(inventory: Path, cluster: str, candidate: str, limits: Limits) -> list[GateResult]:
    return run_preflight(load_inventory(inventory), cluster, candidate, limits)
