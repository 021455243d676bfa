"""Moving files between a server's host and this machine: a pluggable step.

The dump-load method fetches the source's ib_buffer_pool, filters it here, and
pushes it into the target's datadir. LocalCopier does that on this host (the
sandbox, or a tool running on the database host); HostCopier goes through each
server's host as the inventory declares it (local, ssh, none).
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from dbmigrate.db.connection import Server
from dbmigrate.exceptions import DbmigrateError, UsageError
from dbmigrate.hosts import Host, LocalHost

if TYPE_CHECKING:
    from dbmigrate.config import Inventory

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "localhost.localdomain"})


class Copier(Protocol):
    def fetch(self, server: Server, remote_path: str, workdir: Path) -> Path:
        """A local, readable path with the content of `remote_path` on `server`'s host
        (a copy in `workdir`, or the file itself when it is already here)."""

    def push(self, local_path: Path, server: Server, remote_path: str) -> None:
        """Install `local_path` as `remote_path` on `server`'s host, atomically, readable by mysqld."""


def is_local(server: Server) -> bool:
    if server.unix_socket or server.host in LOCAL_HOSTS:
        return True
    try:
        return server.host in (socket.gethostname(), socket.getfqdn())
    except OSError:
        return False


class LocalCopier:
    """Both ends on this host: plain file copies."""

    def _require_local(self, server: Server) -> None:
        if not is_local(server):
            raise UsageError(f"{server.name} runs on {server.host}, not on this host: a local copy cannot reach "
                             f"its datadir", hint="run dbmigrate on the database hosts, or use --method replay/scan")

    def fetch(self, server: Server, remote_path: str, workdir: Path) -> Path:
        self._require_local(server)
        return _in_place(server, remote_path)

    def push(self, local_path: Path, server: Server, remote_path: str) -> None:
        self._require_local(server)
        dest = Path(remote_path)
        tmp = dest.with_name(f".{dest.name}.dbmigrate-tmp")
        try:
            shutil.copyfile(local_path, tmp)
            st = dest.parent.stat()
            if os.geteuid() == 0:
                # mysqld must be able to read it: give it the datadir's owner.
                os.chown(tmp, st.st_uid, st.st_gid)
            os.chmod(tmp, 0o640)
            os.replace(tmp, dest)  # InnoDB never sees a half-written file
        except PermissionError:
            tmp.unlink(missing_ok=True)
            raise DbmigrateError(f"cannot write {dest} on {server.name}: permission denied",
                                 hint="run as a user that can write the datadir (root or mysql)")
        except FileNotFoundError:
            tmp.unlink(missing_ok=True)
            raise DbmigrateError(f"directory {dest.parent} on {server.name} does not exist",
                                 hint="is the datadir in the inventory right?")


# Prints the directory's owner only when we may give files away (root); otherwise
# the new file keeps the ssh user's, who then needs to share mysqld's group.
_OWNER_IF_ROOT = 'if [ "$(id -u)" -eq 0 ]; then stat -c %u:%g -- "$1"; fi'


class HostCopier:
    """Through each server's host (`host_of(server)`, e.g. from the inventory's access declarations)."""

    def __init__(self, host_of: Callable[[Server], Host]):
        self.host_of = host_of

    @classmethod
    def for_inventory(cls, inventory: Inventory) -> "HostCopier":
        from dbmigrate.hosts import host_for

        return cls(lambda server: host_for(inventory, server.name))

    def fetch(self, server: Server, remote_path: str, workdir: Path) -> Path:
        host = self.host_of(server)
        if isinstance(host, LocalHost):
            return _in_place(server, remote_path)
        local = Path(workdir) / Path(remote_path).name
        host.fetch(remote_path, local, timeout=600)
        return local

    def push(self, local_path: Path, server: Server, remote_path: str) -> None:
        host = self.host_of(server)
        parent = os.path.dirname(remote_path) or "."
        owner = host.run(["sh", "-c", _OWNER_IF_ROOT, "sh", parent], what=f"read the owner of {parent}",
                         timeout=30).text.strip() or None
        host.write_bytes(remote_path, Path(local_path).read_bytes(), mode=0o640, owner=owner, timeout=600)


def _in_place(server: Server, remote_path: str) -> Path:
    path = Path(remote_path)
    try:
        with path.open("rb"):
            pass  # read in place: slow logs can be gigabytes, and nothing here modifies them
        return path
    except FileNotFoundError:
        raise DbmigrateError(f"{remote_path} on {server.name} does not exist",
                             hint="is the datadir in the inventory right? (datadir: under the server)")
    except PermissionError:
        raise DbmigrateError(f"cannot read {remote_path} on {server.name}: permission denied",
                             hint="run as a user that can read the datadir (root or the mysql group)")
