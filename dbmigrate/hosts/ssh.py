"""A remote host reached through the system OpenSSH client.

Only what the inventory sets is passed to ssh, so ~/.ssh/config and the agent
keep applying to everything else. One master connection per host is kept in a
private control directory (ControlMaster/ControlPersist) so that repeated
operations cost a channel, not a handshake.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import weakref
from dataclasses import dataclass
from typing import Sequence

from dbmigrate.hosts.base import Host
from dbmigrate.hosts.errors import HostError, HostTimeout, classify_ssh_failure

SSH_FAILED = 255  # ssh's own exit status for connection and authentication failures
_SAFE_STRICT = ("yes", "accept-new")
_open_hosts: "weakref.WeakSet[SshHost]" = weakref.WeakSet()


@dataclass(frozen=True)
class SshSettings:
    address: str
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    jump_host: str | None = None
    known_hosts_file: str | None = None
    strict_host_key_checking: str | None = None  # None: what ssh_config says (default: ask -> refused in batch mode)
    connect_timeout: float = 10
    control_persist: int = 60
    server_alive_interval: int = 5
    options: tuple[tuple[str, str], ...] = ()  # extra -o KEY=VALUE, in order

    def __post_init__(self) -> None:
        check_ssh_options(self.strict_host_key_checking, dict(self.options))

    @property
    def target(self) -> str:
        return f"{self.user}@{self.address}" if self.user else self.address

    def describe(self) -> str:
        port = f":{self.port}" if self.port else ""
        return f"ssh {self.target}{port}"


def check_ssh_options(strict: str | None, options: dict[str, str]) -> None:
    """Host keys are always checked: refuse settings that would turn checking off."""
    if strict is not None and strict not in _SAFE_STRICT:
        raise ValueError(f"strict_host_key_checking must be one of {', '.join(_SAFE_STRICT)} "
                         f"(host keys are never left unchecked)")
    for k, v in options.items():
        key = k.lower()
        if key == "stricthostkeychecking" and str(v).lower() not in _SAFE_STRICT:
            raise ValueError("StrictHostKeyChecking may only be yes or accept-new")
        if key == "userknownhostsfile" and str(v).strip() == "/dev/null":
            raise ValueError("UserKnownHostsFile=/dev/null would leave host keys unchecked")
        if key in ("controlmaster", "controlpath", "controlpersist", "batchmode"):
            raise ValueError(f"{k} is managed by dbmigrate")


def ssh_options(s: SshSettings, control_path: str) -> list[str]:
    """ssh's arguments before the target: only what the inventory set, plus connection reuse and batch mode."""
    args = ["-o", "BatchMode=yes",  # never prompt: a prompt would hang an unattended run
            "-o", f"ControlPath={control_path}",
            "-o", f"ConnectTimeout={max(1, int(round(s.connect_timeout)))}",
            "-o", f"ServerAliveInterval={s.server_alive_interval}", "-o", "ServerAliveCountMax=3"]
    if s.port:
        args += ["-p", str(s.port)]
    if s.identity_file:
        args += ["-i", os.path.expanduser(s.identity_file)]
    if s.jump_host:
        args += ["-J", s.jump_host]
    if s.known_hosts_file:
        args += ["-o", f"UserKnownHostsFile={os.path.expanduser(s.known_hosts_file)}"]
    if s.strict_host_key_checking:
        args += ["-o", f"StrictHostKeyChecking={s.strict_host_key_checking}"]
    for k, v in s.options:
        args += ["-o", f"{k}={v}"]
    return args


def remote_command(argv: Sequence[str]) -> str:
    """The one string ssh hands to the remote user's shell: every word quoted."""
    if not argv:
        raise ValueError("empty command")
    return shlex.join(argv)


class SshHost(Host):
    kind = "ssh"

    def __init__(self, name: str, settings: SshSettings):
        super().__init__(name)
        self.settings = settings
        self._dir: str | None = None
        _open_hosts.add(self)
        atexit.register(self.close)

    def __repr__(self) -> str:
        return f"<SshHost {self.name} {self.settings.describe()}>"

    @property
    def control_dir(self) -> str:
        if self._dir is None:
            # Private and short: a unix socket path must fit in 108 bytes.
            self._dir = tempfile.mkdtemp(prefix="dbm-ssh-")
            os.chmod(self._dir, 0o700)
        return self._dir

    @property
    def control_path(self) -> str:
        return os.path.join(self.control_dir, "%C")

    def _base(self, master: str = "no") -> list[str]:
        # ssh keeps the first value given for an option, so ControlMaster is set once, here.
        return ["ssh", "-o", f"ControlMaster={master}", *ssh_options(self.settings, self.control_path)]

    def _master_alive(self) -> bool:
        """A master listens on the control socket (a killed master leaves a stale one: removed here)."""
        if not self._dir:
            return False
        for n in os.listdir(self._dir):
            if n == "master.err":
                continue
            path = os.path.join(self._dir, n)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect(path)
                    return True
                except OSError:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
        return False

    def connect(self) -> None:
        """Open (or reuse) the master connection; errors say why the host cannot be reached."""
        if self._master_alive():
            return
        s = self.settings
        argv = [*self._base(master="yes"), "-o", f"ControlPersist={s.control_persist}",
                "-f", "-N", "--", s.target]
        # stderr to a file: the backgrounded master keeps the descriptor open, so a pipe would never see EOF.
        err_path = os.path.join(self.control_dir, "master.err")
        with open(err_path, "w+b") as err:
            try:
                rc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                    timeout=s.connect_timeout + 10).returncode
            except subprocess.TimeoutExpired:
                raise HostTimeout(f"{self.name}: no ssh connection to {s.describe()} within "
                                  f"{s.connect_timeout + 10:g} s",
                                  hint="check the address, the port and firewalls") from None
            except FileNotFoundError:
                raise HostError(f"{self.name}: the OpenSSH client (`ssh`) is not installed on this machine",
                                hint="apt-get install openssh-client") from None
            err.seek(0)
            text = err.read().decode(errors="replace")
        if rc != 0:
            raise classify_ssh_failure(self._label(), text, started=False)

    def _label(self) -> str:
        return f"{self.name} ({self.settings.describe()})"

    def command(self, argv: Sequence[str]) -> list[str]:
        self.connect()
        return [*self._base(), "--", self.settings.target, remote_command(argv)]

    def _transport_failure(self, returncode: int, stderr: str, started: bool) -> HostError | None:
        if returncode != SSH_FAILED:
            return None
        if not self._master_alive():
            # The master is gone: the connection dropped under us.
            return classify_ssh_failure(self._label(), stderr or "connection closed", started=True)
        return classify_ssh_failure(self._label(), stderr, started=started)

    def close(self) -> None:
        """Stop the master connection and remove the private control directory."""
        if self._dir is None:
            return
        if self._master_alive():
            subprocess.run([*self._base(), "-O", "exit", "--", self.settings.target], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=False)
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None


def close_all() -> None:
    """Close every ssh host's shared connection (end of a run, or of a test session)."""
    for h in list(_open_hosts):
        h.close()
