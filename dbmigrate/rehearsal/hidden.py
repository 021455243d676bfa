"""Run the tool the way it runs from an ops host: the database hosts' directories out of sight.

A rehearsal with `--remote` runs its playbook in a child process whose mount
namespace puts an empty tmpfs over every instance directory of the sandbox
(`unshare -m`, which needs root or user namespaces). The instances, their
sshd and HAProxy keep running outside that namespace, so the tool reaches the
servers' files only the way the inventory says: through ssh. A file access
that bypassed the host layer fails instead of passing silently.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

Progress = Callable[[str], None]


def hiding_unavailable(probe_dir: Path) -> str | None:
    """Why directories cannot be hidden here (None when they can)."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    r = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs dbm-hidden {shlex.quote(str(probe_dir))}"],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return f"no mount namespace for this user ({r.stderr.strip() or 'unshare -m failed'}): run as root"
    return None


def hidden_argv(argv: Sequence[str], hide: Sequence[Path]) -> list[str]:
    """argv run in a new mount namespace with an empty tmpfs over each directory in `hide`,
    checked empty before the program starts."""
    mounts = " && ".join(f"mount -t tmpfs dbm-hidden {shlex.quote(str(p))} && "
                         f"test -z \"$(ls -A {shlex.quote(str(p))})\"" for p in hide)
    return ["unshare", "-m", "sh", "-c", f"{mounts} && exec {' '.join(map(shlex.quote, argv))}"]


@dataclass
class ChildRun:
    run_id: str = ""
    status: str = "unknown"
    exit_code: int = 0
    summary: str = ""
    stderr_tail: str = ""
    steps: list[dict] = field(default_factory=list)


def run_playbook(playbook: Path, *, hide: Sequence[Path], progress: Progress | None = None,
                 timeout_s: float = 900) -> ChildRun:
    """`dbmigrate run PLAYBOOK --yes --json` in a child (hidden from `hide` when given);
    its events are followed line by line for progress and the outcome."""
    say = progress or (lambda m: None)
    argv = [sys.executable, "-m", "dbmigrate", "run", str(playbook), "--yes", "--json"]
    if hide:
        argv = hidden_argv(argv, hide)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, COLUMNS="200"), stdin=subprocess.DEVNULL)
    out = ChildRun()
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            out.run_id = out.run_id or str(event.get("run_id") or "")
            kind = event.get("event")
            if kind == "StepFinished":
                out.steps.append(event)
                # A failed step has no sentence: its error says why.
                said = event.get("sentence") or event.get("error") or ""
                say(f"{event.get('name')}: {event.get('status')} — {said}")
            elif kind == "RunFinished":
                out.status, out.summary = str(event.get("status")), str(event.get("summary", ""))
        out.exit_code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out.exit_code = proc.wait()
        out.status = "timed_out"
    finally:
        err = proc.stderr.read() if proc.stderr else ""
        out.stderr_tail = err[-2000:]
    return out
