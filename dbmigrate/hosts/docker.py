"""A server that runs in a container, reached through the Docker CLI.

Every operation is `docker exec -i CONTAINER PROGRAM ...`: reading and writing
files, `df`, `mariadb-backup`, all run inside the container, against the
container's own filesystem, exactly as they would over ssh on a host of its own.
Nothing of the server's files is opened from this machine. `engine` names the
Docker Engine's socket (`unix:///...`) when it is not the default one.

Each exec is counted per container (`exec_counts()`), so a rehearsal can show
that the tool reached the servers' files only this way.
"""

from __future__ import annotations

import collections
import re
import threading
from typing import Sequence

from dbmigrate.hosts.base import Host
from dbmigrate.hosts.errors import HostError, HostUnreachable, ProgramMissing

# `docker exec`'s own exit statuses: 125 the engine or the exec failed, 126 the
# program cannot be run, 127 it was not found in the container.
DOCKER_FAILED, CANNOT_RUN, NOT_FOUND = 125, 126, 127
CONTAINER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")

_lock = threading.Lock()
_execs: collections.Counter[str] = collections.Counter()


def exec_counts() -> dict[str, int]:
    """How many programs were run in each container by this process, through its DockerHost."""
    with _lock:
        return dict(_execs)


def check_container_name(name: str) -> str:
    if not CONTAINER_RE.match(name or ""):
        raise ValueError(f"{name!r} is not a container name (letters, digits, _ . -; starting with a letter or digit)")
    return name


def check_engine(engine: str | None) -> str | None:
    if engine is not None and not engine.startswith(("unix://", "tcp://", "ssh://")):
        raise ValueError(f"engine {engine!r} must be a Docker host address: unix:///path/docker.sock, "
                         "tcp://host:port or ssh://user@host")
    return engine


class DockerHost(Host):
    kind = "docker"

    def __init__(self, name: str, container: str, engine: str | None = None, docker: str = "docker"):
        super().__init__(name)
        self.container = check_container_name(container)
        self.engine = check_engine(engine)
        self.docker = docker

    def __repr__(self) -> str:
        return f"<DockerHost {self.name} container={self.container}>"

    def engine_args(self) -> list[str]:
        return ["-H", self.engine] if self.engine else []

    def command(self, argv: Sequence[str]) -> list[str]:
        if not argv:
            raise ValueError("empty command")
        with _lock:
            _execs[self.container] += 1
        # -i: stdin reaches the program (atomic writes, streams); no -t: bytes pass unchanged.
        return [self.docker, *self.engine_args(), "exec", "-i", self.container, *argv]

    def _transport_failure(self, returncode: int, stderr: str, started: bool) -> HostError | None:
        low = stderr.lower()
        if "cannot connect to the docker daemon" in low or "is the docker daemon running" in low:
            return HostUnreachable(
                f"{self.name}: no Docker Engine answers{' at ' + self.engine if self.engine else ''}",
                hint="start the engine (or the rehearsal that owns it), or fix access.engine in the inventory")
        if "no such container" in low:
            return HostUnreachable(f"{self.name}: container {self.container} does not exist",
                                   hint="check access.container in the inventory (docker ps -a lists them)")
        if "is not running" in low or "is paused" in low or "is restarting" in low:
            return HostUnreachable(f"{self.name}: container {self.container} is not running",
                                   hint=f"start it (docker start {self.container}) and see its log "
                                        f"(docker logs {self.container})")
        if returncode in (CANNOT_RUN, NOT_FOUND) and ("executable file not found" in low or "no such file" in low
                                                     and "exec" in low):
            prog = _program_named(stderr)
            return ProgramMissing(f"{self.name}: `{prog}` is not installed in container {self.container}",
                                  hint=f"install {prog} in the container's image")
        if returncode == DOCKER_FAILED and "error response from daemon" in low:
            return HostUnreachable(f"{self.name}: the Docker Engine refused the exec ({stderr.strip()[-200:]})",
                                   hint=f"see docker inspect {self.container}")
        return None


def _program_named(stderr: str) -> str:
    m = re.search(r'exec: "([^"]+)"', stderr) or re.search(r'"([^"]+)": executable file not found', stderr)
    return m.group(1) if m else "the program"
