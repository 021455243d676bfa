"""The one dispatcher by warm-up method, for the `warm` command and the procedures' warm-up steps."""

from __future__ import annotations

from typing import Sequence, TypedDict

from dbmigrate.db.connection import Server
from dbmigrate.exceptions import UsageError
from dbmigrate.warm import methods
from dbmigrate.warm.copier import Copier
from dbmigrate.warm.digest import ReplayPlan


class _Common(TypedDict):
    """The keyword arguments every method takes."""
    seconds: float
    threads: int
    per_table: bool
    on_progress: methods.Progress | None


def warm_by(method: str, target: Server, *, source: Server | None = None, plan: ReplayPlan | None = None,
            tables: Sequence[str] = (), seconds: float = 600, target_hit_ratio: float | None = None,
            threads: int = 2, per_table: bool = False, on_progress: methods.Progress | None = None,
            copier: Copier | None = None, source_datadir: str | None = None,
            target_datadir: str | None = None) -> methods.WarmResult:
    """Warm `target` by `method`: dump-load of `source`'s resident pages (tables whose ids differ
    are replayed from `plan`), replay of `plan` (or of `source`'s slow log) or a scan of `tables`
    (or of the tables `plan` reads)."""
    common = _Common(seconds=seconds, threads=threads, per_table=per_table, on_progress=on_progress)
    if method == "dump-load":
        if source is None:
            raise UsageError("dump-load needs a source server (the server whose pages are loaded)")
        return methods.dump_load(source, target, plan=plan, copier=copier, source_datadir=source_datadir,
                                 target_datadir=target_datadir, **common)
    if method == "replay":
        if plan is None:
            if source is None:
                raise UsageError("replay needs a digest: a slow log, or a server whose slow log is digested")
            plan = methods.replay_plan_from_server(source, copier=copier)
        return methods.replay(target, plan, tables=list(tables) or None, target_hit_ratio=target_hit_ratio, **common)
    if method == "scan":
        wanted = list(tables)
        if not wanted and plan is not None:
            wanted, _ = methods.expand_numbered_tables(target, plan.hot_tables())
        if not wanted:
            raise UsageError("warm.method scan needs warm.tables (schema.table, ...)")
        return methods.scan(target, wanted, target_hit_ratio=target_hit_ratio, **common)
    raise UsageError(f"unknown warm-up method {method!r}", hint="dump-load, replay, scan or none")
