"""Digest capture as a use case: a slow-log window on one server, read through its host."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, Callable, Optional

from dbmigrate.config import load_inventory
from dbmigrate.db.applier import Applier
from dbmigrate.digest import window
from dbmigrate.digest.window import HostFileReader
from dbmigrate.exceptions import UsageError
from dbmigrate.hosts import host_for, slow_log_source


def _open_server(inventory: Optional[Path], server: Optional[str]):
    if inventory is None or server is None:
        raise UsageError("--inventory and --server are required",
                         hint="e.g. --inventory inventory.yaml --server db-1 "
                              "(or digest an existing log with --slow-log FILE)")
    return load_inventory(inventory).open(server)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def capture(inventory: Optional[Path], server: Optional[str], seconds: float, out: Optional[Path], *,
            saved_settings: Optional[Path] = None, log_file: Optional[str] = None,
            progress: Callable[[str], None] | None = None) -> Any:
    """Open a window (long_query_time=0 to a file of our own), digest it, restore the settings."""
    srv = _open_server(inventory, server)
    try:
        inv = load_inventory(inventory)
        source = slow_log_source(inv, server)
        reader = HostFileReader(host_for(inv, server)) if source == "file" else None
        # A plain `kill` should still close the window: turn SIGTERM into an exit that runs
        # the restore. SIGKILL cannot be caught; that is what `digest restore` is for.
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            return window.capture_window(srv, seconds, out, saved_settings_file=saved_settings, log_file=log_file,
                                         reader=reader, progress=progress, source=source)
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        srv.close()


def restore(inventory: Path, server: str, saved: dict, *, dry_run: bool = False) -> tuple[str, list[str], list[str]]:
    """Put back saved slow-log settings: (server name, what changed, statements planned in a dry run)."""
    srv = _open_server(inventory, server)
    try:
        applier = Applier(srv, dry_run=dry_run)
        changed = window.restore(srv, saved, applier=applier)
        return srv.name, changed, list(applier.planned)
    finally:
        srv.close()
