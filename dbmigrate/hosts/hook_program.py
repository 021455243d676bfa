"""Running an operator's hook program on the ops host: own session, bounded time, output captured."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Mapping, Sequence


@dataclass(frozen=True)
class HookExit:
    status: str  # ok, failed (non-zero exit or could not start), timeout
    exit_code: int | None
    stdout: str
    stderr: str


def run_hook_program(argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None, timeout_s: float) -> HookExit:
    """Run `argv` with exactly `env`; past `timeout_s` its whole process group is killed."""
    try:
        # Own session so a timeout kills the hook's children too (they hold our pipes).
        proc = subprocess.Popen(
            list(argv), env=dict(env), cwd=cwd,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True,
        )
    except OSError as exc:
        return HookExit("failed", None, "", f"cannot execute {argv[0]}: {exc.strerror or exc}")
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return HookExit("timeout", None, out or "", err or "")
    return HookExit("ok" if proc.returncode == 0 else "failed", proc.returncode, out or "", err or "")
