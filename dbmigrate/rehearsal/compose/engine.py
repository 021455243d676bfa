"""The Docker Engine a compose rehearsal runs on.

An engine that already answers (DOCKER_HOST, else the system socket) is used as
it is and left running. When none answers, the rehearsal starts one of its own
as root: `dockerd --bridge=none --iptables=false --ip6tables=false` with its
socket, data-root and exec-root under DBMIGRATE_HOME (it adds no bridge and no
firewall rule), and stops it afterwards. The data-root is kept between runs, so
built images are cached; everything else of the engine goes with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from dbmigrate.exceptions import SandboxError
from dbmigrate.home import home
from dbmigrate.rehearsal.processes import descendants

SYSTEM_SOCKET = "unix:///var/run/docker.sock"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes; containerd's socket sits a few levels below the exec-root

Progress = Callable[[str], None]


def docker_binary() -> str:
    found = shutil.which("docker")
    if not found:
        raise SandboxError("the Docker CLI (`docker`) is not installed",
                           hint="run ./scripts/setup --compose, or apt-get install docker.io")
    return found


def docker_root() -> Path:
    """Where the tool keeps its own engine's files and the image cache."""
    return home() / "docker"


@dataclass
class Engine:
    """A Docker Engine: its address, and whether this run started it (and so must stop it)."""

    address: str
    owned: bool = False
    pid: int | None = None
    data_root: Path | None = None
    exec_root: Path | None = None
    log: Path | None = None
    version: str = ""
    _proc: subprocess.Popen | None = field(default=None, repr=False)

    def argv(self, *args: str) -> list[str]:
        """`docker -H ADDRESS ARGS`: every call names its engine, DOCKER_HOST or not."""
        return [docker_binary(), "-H", self.address, *args]

    def env(self) -> dict[str, str]:
        """The environment for docker and compose CLIs talking to this engine."""
        e = dict(os.environ)
        e["DOCKER_HOST"] = self.address
        e["DOCKER_BUILDKIT"] = "0"  # the classic builder: no buildx plugin needed, same on every client
        e.pop("DOCKER_CONTEXT", None)
        return e

    def run(self, *args: str, timeout: float = 120, check: bool = True, input: bytes | None = None,
            what: str | None = None) -> subprocess.CompletedProcess:
        try:
            res = subprocess.run(self.argv(*args), capture_output=True, timeout=timeout, env=self.env(),
                                 input=input, stdin=None if input is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise SandboxError(f"`docker {' '.join(args[:3])}` did not finish within {timeout:g} s",
                               hint="check the engine's log and the machine's load") from None
        if check and res.returncode != 0:
            err = res.stderr.decode(errors="replace").strip().splitlines()
            raise SandboxError(f"{what or 'docker ' + ' '.join(args[:3])} failed: {err[-1] if err else res.returncode}")
        return res

    def text(self, *args: str, timeout: float = 120) -> str:
        return self.run(*args, timeout=timeout).stdout.decode(errors="replace")

    def processes(self) -> list[tuple[int, str]]:
        """Processes of this engine still alive (dockerd, containerd, shims): those naming its roots."""
        if not self.owned:
            return []
        marks = [str(p) for p in (self.data_root, self.exec_root) if p]
        return [(pid, cmd) for pid, cmd in _all_processes() if any(m in cmd for m in marks)]

    def stop(self) -> None:
        """Stop an engine this run started (an engine found running is left alone)."""
        if not self.owned:
            return
        if self.pid and _alive(self.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while _alive(self.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
        # A shim or containerd outliving dockerd (it was killed): the containers' processes under
        # the shims go too, or they would run on, reparented, with nothing left to stop them.
        leftover = [pid for pid, _ in self.processes()]
        for pid in descendants(*leftover) + leftover:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5)
        deadline = time.monotonic() + 10
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.exec_root:
            _unmount_below(self.exec_root)
            shutil.rmtree(self.exec_root, ignore_errors=True)
        if self.data_root:
            _unmount_below(self.data_root, including=True)  # what a killed engine left mounted
        _record_path().unlink(missing_ok=True)
        self.owned = False


def answers(address: str, timeout: float = 10) -> str | None:
    """The engine's version when an engine answers at `address`, else None."""
    try:
        res = subprocess.run([docker_binary(), "-H", address, "version", "--format", "{{.Server.Version}}"],
                             capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None
    return res.stdout.strip() if res.returncode == 0 and res.stdout.strip() else None


def find_running() -> Engine | None:
    """An engine that already runs: DOCKER_HOST's, else the system socket's."""
    for address in filter(None, (os.environ.get("DOCKER_HOST"), SYSTEM_SOCKET)):
        version = answers(address)
        if version:
            return Engine(address, owned=False, version=version)
    return None


def acquire(progress: Progress | None = None) -> Engine:
    """An engine to run on: one that answers, else one started now (stop it with `Engine.stop`)."""
    say = progress or (lambda m: None)
    found = find_running()
    if found:
        say(f"Docker Engine {found.version} at {found.address} (already running: used as it is)")
        return found
    if os.environ.get("DOCKER_HOST"):
        raise SandboxError(f"no Docker Engine answers at DOCKER_HOST={os.environ['DOCKER_HOST']}",
                           hint="start that engine, or unset DOCKER_HOST to let the rehearsal start one of its own")
    return start_own(say)


def start_own(say: Progress) -> Engine:
    dockerd = shutil.which("dockerd") or shutil.which("dockerd", path="/usr/sbin:/usr/bin:/usr/local/bin")
    if not dockerd:
        raise SandboxError("no Docker Engine answers and dockerd is not installed",
                           hint="run ./scripts/setup --compose (installs docker.io), or point DOCKER_HOST at a running engine")
    if os.geteuid() != 0:
        raise SandboxError("no Docker Engine answers and only root may start one (this user is not root)",
                           hint="start an engine (sudo systemctl start docker) and give this user access to its "
                                "socket, or run the rehearsal as root")
    docker_binary()
    root = docker_root()
    data_root = root / "data"
    data_root.mkdir(parents=True, exist_ok=True)
    _refuse_if_in_use(data_root)
    exec_root = _exec_root(root)
    sock = exec_root / "docker.sock"
    address = f"unix://{sock}"
    log = root / "dockerd.log"
    argv = [dockerd, "--bridge=none", "--iptables=false", "--ip6tables=false", "--data-root", str(data_root),
            "--exec-root", str(exec_root), "--pidfile", str(exec_root / "dockerd.pid"), "-H", address]
    t0 = time.monotonic()
    with open(log, "ab") as out:
        out.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    engine = Engine(address, owned=True, pid=proc.pid, data_root=data_root, exec_root=exec_root, log=log,
                    _proc=proc)
    _record_path().write_text(json.dumps({"pid": proc.pid, "address": address, "data_root": str(data_root)}))
    try:
        while True:
            if proc.poll() is not None:
                raise SandboxError(f"dockerd exited during start-up (exit {proc.returncode}): {_tail(log)}",
                                   hint=f"see {log}")
            version = answers(address, timeout=5)
            if version:
                engine.version = version
                break
            if time.monotonic() - t0 > START_TIMEOUT_S:
                raise SandboxError(f"dockerd did not answer within {START_TIMEOUT_S} s: {_tail(log)}",
                                   hint=f"see {log}")
            time.sleep(0.2)
    except BaseException:
        engine.stop()
        raise
    say(f"no Docker Engine was running: started dockerd {engine.version} of our own "
        f"({time.monotonic() - t0:.1f}s; --bridge=none, no firewall rule; stopped at the end)")
    return engine


def _exec_root(root: Path) -> Path:
    """A fresh exec-root; under DBMIGRATE_HOME unless that path is too long for containerd's socket."""
    base = root / "run"
    if len(str(base)) + 48 <= MAX_SOCKET_PATH:
        base.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="e", dir=base))
    return Path(tempfile.mkdtemp(prefix="dbmd-", dir="/tmp"))


def _record_path() -> Path:
    return docker_root() / "engine.json"


def _refuse_if_in_use(data_root: Path) -> None:
    """One engine per data-root: another run's engine may be using it right now."""
    try:
        rec = json.loads(_record_path().read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return
    pid = rec.get("pid")
    if pid and _alive(pid) and str(data_root) in _cmdline(pid):
        raise SandboxError(f"another compose rehearsal's Docker Engine (pid {pid}) is using {data_root}",
                           hint=f"wait for that rehearsal to end, or use its engine: DOCKER_HOST={rec.get('address')}")
    _record_path().unlink(missing_ok=True)


def _tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return "(no log)"
    return " | ".join(t.strip() for t in text)


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _all_processes() -> list[tuple[int, str]]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != os.getpid():
            cmd = _cmdline(int(p.name))
            if cmd and _alive(int(p.name)):
                out.append((int(p.name), cmd))
    return out


def _unmount_below(path: Path, including: bool = False) -> None:
    """Mounts an engine left under its roots (a killed engine does not unmount them)."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return
    targets = [m.split()[1] for m in mounts if len(m.split()) > 1
               and (m.split()[1].startswith(str(path) + "/") or including and m.split()[1] == str(path))]
    for t in sorted(targets, key=len, reverse=True):
        subprocess.run(["umount", "-l", t], capture_output=True, timeout=10, check=False)


def run_cli(argv: Sequence[str], env: dict[str, str], *, cwd: Path | None = None, timeout: float = 300) -> \
        subprocess.CompletedProcess:
    """A docker or compose CLI call whose failure is reported by the caller."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SandboxError(f"`{' '.join(argv[:3])}` did not finish within {timeout:g} s",
                           hint="check the engine's log and the machine's load") from None
