"""A real OpenSSH server on loopback, so a rehearsal (and the tests) reach
instance files only the way they would on other machines: over ssh.

Debian's /usr/sbin/sshd runs in the foreground (`-D -e -f CONFIG`) on
127.0.0.1 and a free port, with a host key and a client key made for it and a
known_hosts file that pins the host key. Logins are by key only; as root,
`PermitRootLogin prohibit-password` allows that.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from dbmigrate.home import home
from dbmigrate.exceptions import SandboxError
from dbmigrate.rehearsal.processes import descendants
from dbmigrate.rehearsal.sandbox.ports import free_port, port_in_use

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class SshdEndpoint:
    """What a client needs: address, port, user, its key and the pinned host key."""

    address: str
    port: int
    user: str
    identity_file: str
    known_hosts_file: str

    def access(self) -> dict:
        """An inventory `access:` block for this server."""
        return {"kind": "ssh", "address": self.address, "port": self.port, "user": self.user,
                "identity_file": self.identity_file, "known_hosts_file": self.known_hosts_file,
                "strict_host_key_checking": "yes"}


def _keygen(path: Path, comment: str) -> None:
    if not path.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                       check=True, capture_output=True, timeout=30)


def render_config(directory: Path, port: int) -> str:
    return "\n".join([
        "# written by dbmigrate sandbox",
        f"Port {port}",
        "ListenAddress 127.0.0.1",
        f"HostKey {directory / 'host_ed25519'}",
        f"PidFile {directory / 'sshd.pid'}",
        f"AuthorizedKeysFile {directory / 'authorized_keys'}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",  # the sandbox directory's parents are not ours to tighten
        "MaxSessions 64",  # one shared connection carries many channels
        "MaxStartups 64",
        "LogLevel VERBOSE",
        "",
    ])


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Sshd:
    def __init__(self, directory: str | Path, user: str | None = None):
        self.dir = Path(directory)
        self.user = user or pwd.getpwuid(os.getuid()).pw_name
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.log_path = self.dir / "sshd.log"

    @property
    def endpoint(self) -> SshdEndpoint:
        if self.port is None:
            raise SandboxError("sshd is not running")
        return SshdEndpoint("127.0.0.1", self.port, self.user, str(self.dir / "client_ed25519"),
                            str(self.dir / "known_hosts"))

    def prepare(self) -> None:
        if not os.path.exists(SSHD):
            raise SandboxError(f"{SSHD} is missing", hint="apt-get install openssh-server")
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        _keygen(self.dir / "host_ed25519", "dbmigrate-sandbox-host")
        _keygen(self.dir / "client_ed25519", "dbmigrate-sandbox-client")
        shutil.copyfile(self.dir / "client_ed25519.pub", self.dir / "authorized_keys")
        # sshd refuses to start without its privilege separation directory.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)

    def start(self, port: int | None = None, timeout: float = 10) -> SshdEndpoint:
        self.prepare()
        self.port = port or free_port()
        conf = self.dir / "sshd_config"
        conf.write_text(render_config(self.dir, self.port))
        host_pub = (self.dir / "host_ed25519.pub").read_text().split()
        (self.dir / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        check = subprocess.run([SSHD, "-t", "-f", str(conf)], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise SandboxError(f"sshd refuses its configuration: {check.stderr.strip()}")
        log = open(self.log_path, "ab")
        # Absolute path: sshd re-executes itself for each connection.
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(conf)], stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while not port_in_use(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SandboxError(f"sshd did not start on 127.0.0.1:{self.port}: "
                                   f"{self.log_path.read_text(errors='replace')[-500:]}")
            time.sleep(0.02)
        return self.endpoint

    def _sessions(self) -> list[int]:
        """Per-connection sshd processes (each runs in a session of its own, out of our process group)."""
        if self.proc is None:
            return []
        return [pid for pid in descendants(self.proc.pid) if _comm(pid) == "sshd"]

    def kill(self) -> None:
        """Kill the daemon and every connection at once, as when the network drops: the
        programs those connections started are left to notice it themselves."""
        if self.proc and self.proc.poll() is None:
            sessions = self._sessions()
            os.killpg(self.proc.pid, signal.SIGKILL)
            for pid in sessions:
                _kill(pid)
            self.proc.wait(10)

    def stop(self, timeout: float = 10) -> None:
        """Stop the daemon and its sessions (they share its process group)."""
        if self.proc is None:
            return
        sessions = self._sessions()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)
            except ProcessLookupError:
                pass
        # Sessions forked for clients may outlive the listener briefly.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in sessions:
            _kill(pid)
        self.proc = None

    def __enter__(self) -> "Sshd":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# -- one sshd per sandbox instance -------------------------------------------------------
# Each instance gets a "host" of its own: an sshd on its own port, with its own host key.
# Keys and configuration live outside the sandbox directory, so that a tool whose view
# of that directory is hidden can still log in, and reaches the files only through ssh.

def sandbox_ssh_dir(sandbox_name: str) -> Path:
    return home() / "sandbox-ssh" / sandbox_name


def _is_our_sshd(pid: int, config: str) -> bool:
    try:
        return config in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False


def start_for_sandbox(boxes, sandbox_name: str) -> dict[str, dict]:
    """Start an sshd for every instance of the sandbox; record them in its state and inventory."""
    state = boxes.find(sandbox_name)
    started: dict[str, dict] = dict(state.ssh or {})
    try:
        for iname in state.instances:
            rec = started.get(iname)
            if rec and _is_our_sshd(rec["pid"], rec["config"]):
                continue
            daemon = Sshd(sandbox_ssh_dir(sandbox_name) / iname)
            ep = daemon.start()
            _daemons[daemon.proc.pid] = daemon
            started[iname] = {"pid": daemon.proc.pid, "config": str(daemon.dir / "sshd_config"),
                              "dir": str(daemon.dir), "access": ep.access()}
    except BaseException:
        stop_for_sandbox_records(started)
        raise
    state.ssh = started
    state.save()
    boxes.write_inventory(state)
    return started


_daemons: dict[int, Sshd] = {}  # ours, so that they are reaped when stopped from this process


def stop_for_sandbox_records(records: dict[str, dict]) -> None:
    for rec in records.values():
        pid = rec.get("pid")
        if not pid:
            continue
        daemon = _daemons.pop(pid, None)
        if daemon is not None:
            daemon.stop()
        elif _is_our_sshd(pid, rec["config"]):
            sessions = [p for p in descendants(pid) if _comm(p) == "sshd"]
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 10
            while _is_our_sshd(pid, rec["config"]) and time.monotonic() < deadline:
                time.sleep(0.05)
            for p in [pid, *sessions]:
                _kill(p)


def stop_for_sandbox(state) -> None:
    """Stop the sandbox's sshd processes (by pid, checked against their configuration) and remove their keys."""
    stop_for_sandbox_records(state.ssh or {})
    shutil.rmtree(sandbox_ssh_dir(state.name), ignore_errors=True)
