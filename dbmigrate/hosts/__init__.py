"""How a server's host is reached (local, ssh, docker, none) and everything that
touches a host's files or programs: reading and writing files, running
programs, free space, and streaming between hosts."""

from dbmigrate.hosts.base import Completed, Host, parse_df_available
from dbmigrate.hosts.errors import (ConnectionLost, HostAuthFailed, HostCommandFailed, HostDiskFull, HostError,
                                    HostFileMissing, HostKeyMismatch, HostPermissionDenied, HostTimeout,
                                    HostUnreachable, NoHostAccess, ProgramMissing)
from dbmigrate.hosts.docker import DockerHost
from dbmigrate.hosts.local import LocalHost
from dbmigrate.hosts.none import NoAccessHost
from dbmigrate.hosts.pipe import stream
from dbmigrate.hosts.resolve import host_for, slow_log_source
from dbmigrate.hosts.ssh import SshHost, SshSettings

__all__ = [
    "Completed", "ConnectionLost", "DockerHost", "Host", "HostAuthFailed", "HostCommandFailed", "HostDiskFull", "HostError",
    "HostFileMissing", "HostKeyMismatch", "HostPermissionDenied", "HostTimeout", "HostUnreachable", "LocalHost",
    "NoAccessHost", "NoHostAccess", "ProgramMissing", "SshHost", "SshSettings", "host_for", "parse_df_available",
    "slow_log_source", "stream",
]
