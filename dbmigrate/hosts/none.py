"""A host the tool may not enter (a managed service), or one whose access nobody declared."""

from __future__ import annotations

from typing import Sequence

from dbmigrate.hosts.base import Host
from dbmigrate.hosts.errors import NoHostAccess


class NoAccessHost(Host):
    kind = "none"

    def __init__(self, name: str, declared: bool = True):
        super().__init__(name)
        self.declared = declared

    def command(self, argv: Sequence[str]) -> list[str]:
        prog = argv[0] if argv else "a program"
        if self.declared:
            raise NoHostAccess(
                f"{self.name}: this needs to reach the host's files or programs (`{prog}`), "
                f"and the inventory declares `access: none` for it",
                hint="give dbmigrate ssh access to the host (access: {kind: ssh, ...}); for slow-log windows "
                     "(digest capture, the latency guard) `access: {kind: none, slow_log: table}` reads them over SQL")
        raise NoHostAccess(
            f"{self.name}: this needs to reach the host's files or programs (`{prog}`), "
            f"and the inventory does not say how to reach that host",
            hint="declare access for the server or its host: access: {kind: ssh, user: ..., identity_file: ...}, "
                 "or `kind: local` if dbmigrate runs on it, or `kind: none`")
