"""Running `ansible-playbook` on generated files: the program found next to this Python
(the virtualenv) or on PATH, no secret on its command line (vars come from a 0600 file
named with -e @FILE), output streamed line by line, the PLAY RECAP read back."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from dbmigrate.exceptions import DbmigrateError, UsageError
from dbmigrate.redact import redact

# Our own connection plugins (`dbmigrate_docker`: hosts that are containers), loaded by path.
CONNECTION_PLUGINS = Path(__file__).resolve().parent / "ansible_connection"
_RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+(?P<counts>(?:\w+=\d+\s*)+)$")


class AnsibleFailed(DbmigrateError):
    """ansible-playbook ran and reported failed or unreachable hosts."""


@dataclass
class Recap:
    hosts: dict[str, dict[str, int]] = field(default_factory=dict)  # host -> ok, changed, failed, unreachable, ...

    def total(self, key: str) -> int:
        return sum(c.get(key, 0) for c in self.hosts.values())


def parse_recap(output: str) -> Recap:
    recap, seen = Recap(), False
    for line in output.splitlines():
        if line.startswith("PLAY RECAP"):
            seen = True
            continue
        m = _RECAP.match(line.strip()) if seen else None
        if m:
            recap.hosts[m.group("host")] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group("counts"))}
    return recap


def failure_reason(line: str) -> str:
    """`failed: [h1] (item=x) => {...json...}` -> `[h1] (item=x): its msg` (the whole result is too long)."""
    head, _, body = line.partition(" => ")
    who = head.split(":", 1)[1].strip() if ":" in head else head
    try:
        result = json.loads(body)
        msg = result.get("msg") or result.get("stderr") or ""
    except (ValueError, AttributeError):
        msg = body
    msg = " ".join(str(msg).split())
    return f"{who}: {msg[:300]}" if msg else who


def ansible_playbook() -> str:
    here = Path(sys.executable).parent / "ansible-playbook"
    found = str(here) if here.exists() else shutil.which("ansible-playbook")
    if not found:
        raise UsageError("ansible-playbook is not installed",
                         hint="pip install 'ansible-core>=2.19,<2.20' (scripts/setup --provision installs it into .venv)")
    return found


def private_vars_file(directory: Path, text: str) -> Path:
    """A vars file only this user can read, created with that mode (never widened afterwards)."""
    path = directory / "secrets.yml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


_TASK = re.compile(r"^TASK \[(?P<name>.*)\]")
_ITEM = re.compile(r"^(?P<status>ok|changed|skipping|failed|fatal): \[(?P<host>[^\]]+)\](?: => \(item=(?P<item>[^)]*)\))?")


class AnsibleProgress:
    """One line per task as it starts, and while a task runs longer than `every_s`, a line at
    least every `every_s` saying which hosts and items (instances) it has finished: a
    provisioning that takes minutes is never silent."""

    def __init__(self, say: Callable[[str], None], every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.say, self.every_s, self.clock = say, every_s, clock
        self.started = clock()
        self.task: str | None = None
        self.task_started = self.started
        self.done: list[str] = []
        self.last_said = self.started
        self._lock = threading.Lock()

    def feed(self, line: str) -> None:
        m = _TASK.match(line)
        with self._lock:
            if m:
                self.task, self.task_started, self.done = m.group("name"), self.clock(), []
                self._say(f"provisioning ({self.clock() - self.started:.0f} s): {self.task}")
                return
            m = _ITEM.match(line)
            if m and self.task is not None:
                # An item is an instance's name, or a path of its (its last component names it).
                item = (m.group("item") or m.group("host")).rstrip("/").rsplit("/", 1)[-1]
                if item not in self.done:
                    self.done.append(item)

    def tick(self) -> None:
        with self._lock:
            now = self.clock()
            # Said a little early rather than late: the ticker itself runs late on a busy host.
            if self.task is None or now - self.last_said < 0.8 * self.every_s:
                return
            shown = self.done[:8] + ([f"{len(self.done) - 8} more"] if len(self.done) > 8 else [])
            done = f"; done for {', '.join(shown)}" if self.done else ""
            self._say(f"provisioning ({now - self.started:.0f} s): {self.task} running for "
                      f"{now - self.task_started:.0f} s{done}")

    def _say(self, text: str) -> None:
        self.last_said = self.clock()
        self.say(text)


def run_playbook(workdir: Path, inventory: Path, playbook: Path, vars_file: Path | None,
                 log: Callable[[str], None] = lambda m: None, timeout_s: float = 3600,
                 progress: Callable[[str], None] | None = None, progress_every_s: float = 10.0) -> Recap:
    argv = [ansible_playbook(), "-i", str(inventory), str(playbook)]
    if vars_file is not None:
        argv += ["-e", f"@{vars_file}"]
    config = workdir / "ansible.cfg"  # ours, so that no stray ansible.cfg (cwd, home, /etc) decides
    # Pipelining runs each module over the one ssh session instead of copying it to a temp file first.
    config.write_text("[defaults]\nretry_files_enabled = False\nhost_key_checking = True\nnocolor = True\n"
                      "[ssh_connection]\npipelining = True\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(config), "ANSIBLE_STDOUT_CALLBACK": "default", "PYTHONUNBUFFERED": "1",
           "ANSIBLE_CONNECTION_PLUGINS": str(CONNECTION_PLUGINS)}
    lines: list[str] = []
    try:
        proc = subprocess.Popen(argv, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True)
    except OSError as e:
        raise UsageError(f"cannot run ansible-playbook: {e.strerror or e}") from None
    assert proc.stdout is not None
    tracker = AnsibleProgress(progress, progress_every_s) if progress is not None else None
    ticking = threading.Event()

    def tick(t: AnsibleProgress) -> None:
        while not ticking.wait(0.5):
            t.tick()

    if tracker is not None:
        threading.Thread(target=tick, args=(tracker,), daemon=True, name="ansible-progress").start()
    try:
        for line in proc.stdout:
            line = redact(line.rstrip("\n"))
            lines.append(line)
            if line.strip():
                log(line)
                if tracker is not None:
                    tracker.feed(line)
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AnsibleFailed(f"ansible-playbook did not finish within {timeout_s:g}s") from None
    finally:
        ticking.set()
    output = "\n".join(lines)
    recap = parse_recap(output)
    if proc.returncode != 0 or recap.total("failed") or recap.total("unreachable"):
        failed = [failure_reason(ln) for ln in lines if ln.startswith(("fatal:", "failed:"))][:3]
        bad = [h for h, c in recap.hosts.items() if c.get("failed") or c.get("unreachable")]
        raise AnsibleFailed(f"ansible-playbook failed (exit {proc.returncode})"
                            + (f" on {', '.join(bad)}" if bad else "") + (": " + " | ".join(failed) if failed else ""),
                            hint=f"the generated files are in {workdir}; run them by hand with -vvv to see more")
    return recap
