"""Errors of the host-access layer, and how a failed program's exit status and
stderr are turned into one of them.

Every message names the host and says what to do; OpenSSH reports its own
failures with exit status 255 and a line on stderr, which is what we parse.
"""

from __future__ import annotations

from dbmigrate.exceptions import DbmigrateError


class HostError(DbmigrateError):
    """Something on (or on the way to) a server's host failed."""


class HostUnreachable(HostError):
    """No connection to the host could be made."""


class HostAuthFailed(HostError):
    """The host refused our key (or there was no usable key)."""


class HostKeyMismatch(HostError):
    """The host's key is unknown or differs from the one recorded in known_hosts."""


class HostPermissionDenied(HostError):
    """The host's user may not read or write a file there."""


class HostFileMissing(HostError):
    """A file or directory does not exist on the host."""


class ProgramMissing(HostError):
    """A program the tool needs is not installed on the host (exit status 127)."""


class HostDiskFull(HostError):
    """A write failed because the host's file system is full."""


class ConnectionLost(HostError):
    """The connection dropped while an operation was under way."""


class HostTimeout(HostError):
    """An operation on the host did not finish within its bound."""


class NoHostAccess(HostError):
    """The inventory gives the tool no access to this host."""


class HostCommandFailed(HostError):
    """A program on the host failed for a reason not classified above."""


_UNREACHABLE = ("connection refused", "connection timed out", "no route to host", "could not resolve hostname",
                "network is unreachable", "name or service not known", "operation timed out",
                "connection reset by peer")
_HOST_KEY = ("remote host identification has changed", "host key verification failed",
             "no matching host key type found", "host key for", "you have requested strict checking")
_AUTH = ("permission denied (publickey", "permission denied (password", "too many authentication failures",
         "no more authentication methods", "load key")
_LOST = ("connection closed by", "closed by remote host", "broken pipe", "packet_write_wait", "timeout, server",
         "mux_client", "connection to ", "client_loop")


def _last_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith("@")]
    return lines[-1] if lines else ""


def classify_ssh_failure(host: str, stderr: str, started: bool) -> HostError:
    """An error for ssh's own exit status 255, from what it printed.

    `started`: the operation had already begun (data flowed), so an
    unexplained drop is a lost connection rather than an unreachable host.
    """
    low = stderr.lower()
    detail = _last_line(stderr)
    if "has changed" in low or "key for" in low and "differs" in low:
        return HostKeyMismatch(
            f"{host}: its ssh host key differs from the one recorded in known_hosts (another machine, "
            f"or the host was reinstalled)",
            hint="check that this is the right machine, then replace its line in known_hosts (ssh-keygen -R HOST) "
                 "or point access.known_hosts_file at the right file")
    if any(s in low for s in _HOST_KEY):
        return HostKeyMismatch(
            f"{host}: its ssh host key is not in known_hosts, and host keys are checked ({detail})",
            hint="check that this is the right machine, then update known_hosts (ssh-keygen -R HOST; ssh HOST once) "
                 "or point access.known_hosts_file at the right file")
    if any(s in low for s in _AUTH):
        return HostAuthFailed(
            f"{host}: ssh refused our key ({detail})",
            hint="check access.user and access.identity_file (or the agent's keys) and the host's authorized_keys")
    if any(s in low for s in _UNREACHABLE):
        return HostUnreachable(
            f"{host}: cannot connect over ssh ({detail})",
            hint="check the address and port in the inventory's access block, that sshd runs there, and firewalls")
    if started or any(s in low for s in _LOST):
        return ConnectionLost(
            f"{host}: the ssh connection was lost mid-operation ({detail or 'no message'})",
            hint="nothing half-written was kept; check the network and the host, then run the command again")
    return HostUnreachable(f"{host}: ssh failed ({detail or 'exit status 255, no message'})",
                           hint="run `ssh -v` with the same settings to see why")


def classify_program_failure(host: str, what: str, argv0: str, returncode: int, stderr: str) -> HostError:
    """An error for a program that ran on the host and failed."""
    low = stderr.lower()
    detail = _last_line(stderr)
    if returncode == 127 or "command not found" in low or ": not found" in low:
        return ProgramMissing(f"{host}: `{argv0}` is not installed there (needed to {what})",
                              hint=f"install {argv0} on {host}, or put it on the PATH of the ssh user")
    if "no space left on device" in low or "disk quota exceeded" in low:
        return HostDiskFull(f"{host}: disk full while trying to {what} ({detail})",
                            hint="free space on that file system; nothing half-written was kept")
    if "permission denied" in low or "operation not permitted" in low or returncode == 126:
        return HostPermissionDenied(f"{host}: permission denied while trying to {what} ({detail})",
                                    hint="give the ssh user read/write rights there (a group such as mysql), "
                                         "or connect as a user that has them")
    if "no such file or directory" in low:
        return HostFileMissing(f"{host}: no such file while trying to {what} ({detail})",
                               hint="check the path (datadir, slow log) in the inventory or the server's settings")
    return HostCommandFailed(f"{host}: failed to {what}: `{argv0}` exited with {returncode}"
                             + (f" ({detail})" if detail else ""))
