"""Stopping and starting one mariadbd instance on its host, the way it runs there.

Two ways an instance runs on a provisioned host (see `consolidate provision`):
- systemd: Debian's `mariadb@NAME` unit is active; stop and start go through systemctl,
  so systemd keeps knowing the truth about the service;
- direct (no systemd: containers, rehearsals): a mariadbd whose pid file names a live
  process; it is stopped with SIGTERM (a clean shutdown) and started again with exactly
  the command line it ran with, detached from the session that starts it.

Which one applies is read from the host, never assumed: an instance that is neither
is refused before anything is stopped. Every step is a program run through the host
layer, so a remote host is handled by the same code over ssh.
"""

from __future__ import annotations

import shlex
from typing import Sequence

from dbmigrate.hosts.base import Completed, Host
from dbmigrate.hosts.errors import HostError

SYSTEMD = "systemd"
DIRECT = "direct"
POLL_S = 0.1

# Active unit, on a host whose init is systemd (a unit file alone proves nothing).
_SYSTEMD_ACTIVE = r"""
[ -d "$2" ] && command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet -- "$1"
"""
SYSTEMD_MARK = "/run/systemd/system"  # exists only where systemd is the running init

# The pid in the pid file, when that process lives (a zombie counts as gone).
_LIVE_PID = r"""
[ -r "$1" ] || exit 3
read -r pid < "$1" || exit 3
case $pid in ''|*[!0-9]*) exit 3 ;; esac
kill -0 "$pid" 2>/dev/null || exit 4
[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] && exit 4
echo "$pid"
"""

# SIGTERM is mariadbd's clean shutdown; wait (bounded) until the process has gone.
_STOP_PID = r"""
pid=$1; n=$2; i=0
kill -TERM "$pid" 2>/dev/null || exit 0
while kill -0 "$pid" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; do
  i=$((i+1)); [ "$i" -gt "$n" ] && { echo "still running after the wait" >&2; exit 5; }
  sleep 0.1
done
"""

# Detached: its own session, no descriptor of ours, so the caller (an ssh session too) returns at once.
_START_DETACHED = r"""cd / && setsid "$@" </dev/null >/dev/null 2>&1 &"""

# mariadb-admin ping exits 0 once the server answers on its socket, even refusing the login.
_WAIT_SOCKET = r"""
s=$1; n=$2; i=0
until mariadb-admin --no-defaults --socket="$s" --connect-timeout=2 ping >/dev/null 2>&1; do
  i=$((i+1)); [ "$i" -gt "$n" ] && { echo "no answer on $s" >&2; exit 5; }
  sleep 0.1
done
"""


def unit_name(instance: str) -> str:
    return f"mariadb@{instance}"


def parse_cmdline(raw: bytes) -> list[str]:
    """/proc/PID/cmdline: arguments separated (and ended) by NUL bytes."""
    return [a.decode(errors="surrogateescape") for a in raw.split(b"\0") if a]


def looks_like_mariadbd(argv: Sequence[str]) -> bool:
    return bool(argv) and argv[0].rsplit("/", 1)[-1] in ("mariadbd", "mysqld")


class InstanceService:
    """One instance on `host`: named `name` (its unit is mariadb@NAME), answering on `socket`,
    writing `pid_file`. Use: detect(), then stop() and start() (the same object: a direct
    instance is started again with the command line read before it stopped)."""

    def __init__(self, host: Host, name: str, socket: str, pid_file: str):
        self.host, self.name, self.socket, self.pid_file = host, name, socket, pid_file
        self.mode: str | None = None
        self.argv: list[str] = []
        self.systemd_mark = SYSTEMD_MARK

    def __repr__(self) -> str:
        return f"<InstanceService {self.name} on {self.host.name}: {self.mode or 'not detected'}>"

    def _sh(self, script: str, *args: str, timeout: float = 30, what: str, check: bool = True) -> Completed:
        return self.host.run(["sh", "-c", script, "sh", *args], timeout=timeout, what=what, check=check)

    def live_pid(self) -> int | None:
        r = self._sh(_LIVE_PID, self.pid_file, what=f"read {self.pid_file}", check=False)
        return int(r.text.strip()) if r.returncode == 0 and r.text.strip().isdigit() else None

    def detect(self) -> str:
        """systemd or direct, from what runs on the host now; HostError when neither."""
        unit = unit_name(self.name)
        if self._sh(_SYSTEMD_ACTIVE, unit, self.systemd_mark, what=f"ask systemd about {unit}",
                    check=False).returncode == 0:
            self.mode = SYSTEMD
            return self.mode
        pid = self.live_pid()
        if pid is not None:
            argv = parse_cmdline(self.host.read_bytes(f"/proc/{pid}/cmdline"))
            if looks_like_mariadbd(argv):
                self.mode, self.argv = DIRECT, argv
                return self.mode
        raise HostError(f"{self.host.name}: cannot tell how {self.name} runs: no active {unit} unit and no live "
                        f"mariadbd in {self.pid_file}",
                        hint="start it as `consolidate provision` does (systemd unit or direct), or seed it logically")

    def stop(self, timeout: float = 600) -> None:
        """Clean shutdown, waiting (bounded) until it has exited."""
        if self.mode is None:
            self.detect()
        if self.mode == SYSTEMD:
            self.host.run(["systemctl", "stop", unit_name(self.name)], timeout=timeout,
                          what=f"stop {unit_name(self.name)}")
            return
        pid = self.live_pid()
        if pid is None:
            return  # already gone
        argv = parse_cmdline(self.host.read_bytes(f"/proc/{pid}/cmdline", timeout=30))
        if looks_like_mariadbd(argv):
            self.argv = argv  # what it runs with now is what it starts with again
        self._sh(_STOP_PID, str(pid), str(int(timeout / POLL_S)), timeout=timeout + 30,
                 what=f"stop {self.name} (pid {pid})")

    def start(self, timeout: float = 600) -> None:
        """Start it again and wait (bounded) until it answers on its socket."""
        if self.mode == SYSTEMD:
            self.host.run(["systemctl", "start", unit_name(self.name)], timeout=timeout,
                          what=f"start {unit_name(self.name)}")
        elif self.mode == DIRECT and self.argv:
            if self.live_pid() is None:
                self._sh(_START_DETACHED, *self.argv, what=f"start {self.name}: {shlex.join(self.argv)[:200]}")
        else:
            raise HostError(f"{self.host.name}: {self.name} cannot be started: how it ran was never read",
                            hint=f"start it by hand (unit {unit_name(self.name)}, or mariadbd with its option group)")
        try:
            self._sh(_WAIT_SOCKET, self.socket, str(int(timeout / POLL_S)), timeout=timeout + 30,
                     what=f"wait for {self.name} on {self.socket}")
        except HostError as e:
            how = unit_name(self.name) if self.mode == SYSTEMD else shlex.join(self.argv)
            raise HostError(f"{self.host.name}: {self.name} did not answer on {self.socket} after its start "
                            f"({how}): {e.message}", hint="read the instance's error log (log_error in its option "
                                                          "group); it is stopped with its datadir swapped in") from None


__all__ = ["DIRECT", "SYSTEMD", "InstanceService", "looks_like_mariadbd", "parse_cmdline", "unit_name"]
