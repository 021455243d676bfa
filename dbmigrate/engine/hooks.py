"""Operator hooks: executables run before/after each phase and at the end of a run.

Hooks get a small, explicit environment (a few harmless OS variables plus
DBMIGRATE_*), never the tool's own environment, so credentials such as
MYSQL_PWD cannot leak into a notification script. Output is captured, tailed
and journaled. A failing before/after-phase hook stops the run before the
next phase.
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TYPE_CHECKING, Mapping, Sequence

from dbmigrate.engine.events import HookFinished
from dbmigrate.redact import redact
from dbmigrate.hosts.hook_program import run_hook_program
from dbmigrate.exceptions import DbmigrateError

if TYPE_CHECKING:
    from dbmigrate.engine.step import RunContext

HOOK_KINDS = ("before_phase", "after_phase", "on_success", "on_failure")
# Inherited from the tool's environment; everything else is dropped on purpose.
_SAFE_OS_VARS = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "TMPDIR", "SHELL")
_SECRET_NAME_PARTS = ("PASSWORD", "PASSWD", "PWD", "SECRET", "TOKEN")
_TAIL_LINES = 20
_TAIL_CHARS = 4000


class HookFailed(DbmigrateError):
    """A hook exited non-zero, timed out or could not be started."""


@dataclass(frozen=True)
class HookCommand:
    argv: tuple[str, ...]

    @property
    def display(self) -> str:
        return shlex.join(self.argv)


def parse_hook_command(entry: str | Sequence[str], base_dir: Path | None = None) -> HookCommand:
    """A string is split like a shell would; a relative program path is taken from base_dir.

    `notify.sh` alone is looked up on PATH; `./notify.sh` or `hooks/notify.sh`
    is relative to the playbook's directory, so playbooks are portable.
    """
    argv = shlex.split(entry) if isinstance(entry, str) else [str(a) for a in entry]
    if not argv:
        raise ValueError("empty hook command")
    program = argv[0]
    if base_dir is not None and "/" in program and not os.path.isabs(program):
        argv[0] = str((base_dir / program).resolve())
    return HookCommand(tuple(argv))


def _tail(text: str) -> str:
    lines = text.rstrip("\n").splitlines()[-_TAIL_LINES:]
    return redact("\n".join(lines))[-_TAIL_CHARS:] or ""


class HookRunner:
    """Runs the hooks configured for one run."""

    def __init__(
        self,
        hooks: Mapping[str, Sequence[str | Sequence[str]]] | None = None,
        *,
        timeout_s: float = 60.0,
        base_dir: Path | None = None,
    ) -> None:
        hooks = hooks or {}
        unknown = set(hooks) - set(HOOK_KINDS)
        if unknown:
            raise ValueError(f"unknown hook kinds {sorted(unknown)}; valid: {', '.join(HOOK_KINDS)}")
        self.commands: dict[str, list[HookCommand]] = {
            kind: [parse_hook_command(entry, base_dir) for entry in hooks.get(kind, [])] for kind in HOOK_KINDS
        }
        self.timeout_s = timeout_s
        self.cwd = str(base_dir) if base_dir is not None else None

    def environment(self, ctx: "RunContext[Any, Any]", kind: str, phase: str | None) -> dict[str, str]:
        env = {name: os.environ[name] for name in _SAFE_OS_VARS if name in os.environ}
        for name, value in ctx.hook_env.items():
            if any(part in name.upper() for part in _SECRET_NAME_PARTS) or redact(value) != value:
                ctx.log(f"hook variable {name} looks like a secret and is not passed to hooks", "warning")
                continue
            env[name] = value
        env.update(
            DBMIGRATE_RUN_ID=ctx.run_id,
            DBMIGRATE_PROCEDURE=ctx.procedure,
            DBMIGRATE_CLUSTER=ctx.cluster,
            DBMIGRATE_PHASE=phase or "",
            DBMIGRATE_HOOK=kind,
            DBMIGRATE_DRY_RUN="1" if ctx.dry_run else "0",
        )
        return env

    def run(
        self, kind: str, ctx: "RunContext[Any, Any]", phase: str | None = None, *, skip: set[str] | frozenset[str] = frozenset()
    ) -> None:
        """Run every hook of `kind` in order; raise HookFailed at the first failure.

        `skip` holds command displays already run successfully for this phase
        (resume must not page people or drain a load balancer twice).
        """
        for command in self.commands[kind]:
            if command.display in skip:
                continue
            event = self._run_one(command, kind, ctx, phase)
            ctx.emit(event)
            if event.status != "ok":
                where = f" for phase '{phase}'" if phase else ""
                outcome = (
                    f"timed out after {self.timeout_s:g}s" if event.status == "timeout"
                    else f"exited {event.exit_code}" if event.exit_code is not None
                    else "could not start"
                )
                last = event.stderr_tail.splitlines()[-1] if event.stderr_tail else ""
                raise HookFailed(
                    f"{kind} hook{where} failed: {command.display} {outcome}" + (f": {last}" if last else ""),
                    hint=f"fix the hook, then continue with: dbmigrate resume {ctx.run_id}",
                )

    def _run_one(self, command: HookCommand, kind: str, ctx: "RunContext[Any, Any]", phase: str | None) -> HookFinished:
        started = time.monotonic()
        done = run_hook_program(command.argv, env=self.environment(ctx, kind, phase), cwd=self.cwd,
                                timeout_s=self.timeout_s)
        status, exit_code, out, err = done.status, done.exit_code, done.stdout, done.stderr
        return HookFinished(
            run_id=ctx.run_id, hook=kind, phase=phase, command=command.display, status=status,
            exit_code=exit_code, duration_ms=(time.monotonic() - started) * 1000,
            stdout_tail=_tail(out or ""), stderr_tail=_tail(err or ""),
        )
