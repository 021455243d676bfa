"""The machine dbmigrate runs on."""

from __future__ import annotations

from typing import Sequence

from dbmigrate.hosts.base import Host


class LocalHost(Host):
    kind = "local"

    def __init__(self, name: str = "localhost"):
        super().__init__(name)

    def command(self, argv: Sequence[str]) -> list[str]:
        return list(argv)
