"""Query digests as use cases: capture a slow-log window on one server (read through its
host) or digest a slow log, show one digest, compare two, evaluate a guard policy, and put
back the settings a crashed capture left. The report helpers render what they return."""

from __future__ import annotations

import math
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from dbmigrate.config import load_inventory
from dbmigrate.db.applier import Applier
from dbmigrate.digest import window
from dbmigrate.digest.window import HostFileReader
from dbmigrate.exceptions import UsageError
from dbmigrate.hosts import host_for, slow_log_source

if TYPE_CHECKING:
    from dbmigrate.db.connection import Server
    from rich.console import RenderableType
    from rich.text import Text

    from dbmigrate.digest.compare import Comparison
    from dbmigrate.digest.model import Digest
    from dbmigrate.digest.policy import Decision


def _server_named(inventory: Optional[Path], server: Optional[str]) -> tuple[Path, str]:
    if inventory is None or server is None:
        raise UsageError("--inventory and --server are required",
                         hint="e.g. --inventory inventory.yaml --server db-1 "
                              "(or digest an existing log with --slow-log FILE)")
    return inventory, server


def _open_server(inventory: Optional[Path], server: Optional[str]) -> Server:
    path, name = _server_named(inventory, server)
    return load_inventory(path).open(name)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def capture(inventory: Optional[Path], server: Optional[str], seconds: float, out: Optional[Path], *,
            saved_settings: Optional[Path] = None, log_file: Optional[str] = None,
            progress: Callable[[str], None] | None = None, sample: int = 1) -> Any:
    """Open a window (long_query_time=0 to a file of our own; 1 statement in `sample` logged),
    digest it, restore the settings."""
    path, name = _server_named(inventory, server)
    srv = _open_server(path, name)
    try:
        inv = load_inventory(path)
        source = slow_log_source(inv, name)
        reader = HostFileReader(host_for(inv, name)) if source == "file" else None
        # A plain `kill` should still close the window: turn SIGTERM into an exit that runs
        # the restore. SIGKILL cannot be caught; that is what `digest restore` is for.
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            return window.capture_window(srv, seconds, out, saved_settings_file=saved_settings, log_file=log_file,
                                         reader=reader, progress=progress, source=source, sample=sample)
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        srv.close()


def capture_wire(inventory: Optional[Path], server: Optional[str], seconds: float, out: Optional[Path], *,
                 progress: Callable[[str], None] | None = None) -> Any:
    """A wire window: tcpdump of the server's port on its host, dissected by tshark; nothing on
    the server changes. Refused before anything starts when the host cannot capture."""
    from dbmigrate.digest.wire_window import capture_wire_window

    srv = _open_server(inventory, server)
    assert inventory is not None and server is not None  # _open_server refused otherwise
    try:
        host = host_for(load_inventory(inventory), server)
        return capture_wire_window(srv, host, seconds, out or window.default_digest_file(srv.name), progress=progress)
    finally:
        srv.close()


def choose_window(inventory: Optional[Path], server: Optional[str]) -> tuple[str, str]:
    """`auto`: the window that would miss least on this server now, and why."""
    from dbmigrate.digest.choose import choose

    srv = _open_server(inventory, server)
    assert inventory is not None and server is not None  # _open_server refused otherwise
    try:
        return choose(srv, host_for(load_inventory(inventory), server))
    finally:
        srv.close()


def restore(inventory: Path, server: str, saved: dict[str, Any], *, dry_run: bool = False) -> tuple[str, list[str], list[str]]:
    """Put back saved slow-log settings: (server name, what changed, statements planned in a dry run)."""
    srv = _open_server(inventory, server)
    try:
        applier = Applier(srv, dry_run=dry_run)
        changed = window.restore(srv, saved, applier=applier)
        return srv.name, changed, list(applier.planned)
    finally:
        srv.close()


def check_window(seconds: float) -> None:
    """Before anything is read or connected: a bad number never opens a window."""
    if not math.isfinite(seconds) or not 0 < seconds <= window.MAX_WINDOW_S:
        raise UsageError(f"--seconds {seconds:g}: a capture window lasts between 0 and {window.MAX_WINDOW_S:g} "
                         f"seconds", hint="e.g. --seconds 30")


def digest_file(slow_log: Path, out: Optional[Path]) -> "tuple[Digest, str]":
    """Digest an existing slow log; returns the digest and the sentence saying where it went."""
    target = out or window.default_digest_file(slow_log.stem)
    d = window.digest_slow_log(slow_log, target)
    return d, f"digested {d.query_count} queries in {len(d.classes)} classes from {slow_log}; digest in {target}"


def load_digest(path: Path) -> "Digest":
    from dbmigrate.digest.model import Digest

    return Digest.load(path)


def compare_files(before: Path, after: Path, noise_pct: float, noise_us: float) -> "Comparison":
    """Two digests compared per query class and overall; one without queries is refused."""
    from dbmigrate.digest.compare import Noise, compare
    from dbmigrate.digest.model import Digest

    base, current = Digest.load(before), Digest.load(after)
    for path, d in ((before, base), (after, current)):
        if d.query_count == 0:
            raise UsageError(f"{path} holds no query: there is nothing to compare",
                             hint="capture again while the application sends queries")
    return compare(base, current, Noise(noise_pct, noise_us))


def evaluate_files(policy_file: Path, baseline: Path, current: Path) -> "Decision":
    """What the latency guard would decide for these two digests."""
    from dbmigrate.digest.model import Digest
    from dbmigrate.digest.policy import evaluate, load_policy

    return evaluate(load_policy(policy_file), Digest.load(baseline), Digest.load(current))


def restore_from_file(inventory: Path, server: str, from_file: Path, *, force: bool = False,
                      dry_run: bool = False) -> tuple[str, list[str], list[str]]:
    """Put back the settings saved when a window opened (after a crash of the tool) and mark the
    file restored: (server name, what changed, statements planned in a dry run)."""
    saved = window.load_saved_settings(from_file)
    if saved.get("restored_at") and not force:
        raise UsageError(f"{from_file} was already restored at {saved['restored_at']}",
                         hint="settings may have changed since; pass --force to apply them again anyway")
    name, changed, planned = restore(inventory, server, saved, dry_run=dry_run)
    if not dry_run:
        window.mark_restored(from_file, saved)
    return name, changed, planned


# -- how front ends render what these return -------------------------------------------

def digest_table(digest: "Digest", limit: int = 20, width: int | None = None) -> "RenderableType":
    from dbmigrate.digest.report import digest_table as table

    return table(digest, limit, width)


def comparison_renderable(cmp: "Comparison", limit: int = 30, width: int | None = None) -> Any:
    from dbmigrate.digest.report import comparison_renderable as renderable

    return renderable(cmp, limit, width)


def comparison_markdown(cmp: "Comparison", limit: int = 30) -> str:
    from dbmigrate.digest.report import comparison_markdown as markdown

    return markdown(cmp, limit)


def comparison_json(cmp: "Comparison") -> dict[str, Any]:
    from dbmigrate.digest.report import comparison_json as as_json

    return as_json(cmp)


def decision_text(decision: "Decision") -> "Text":
    from dbmigrate.digest.report import decision_text as text

    return text(decision)
