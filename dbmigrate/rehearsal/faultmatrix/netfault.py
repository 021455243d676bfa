"""Faults of the network and of the tool's own process, each a context manager that undoes
itself whatever happens inside it.

Partitions are `iptables` rules in the INPUT chain on loopback, on one server's port only
(the caller passes ports of servers it started itself). Packets are dropped, not refused:
the sender's kernel keeps retransmitting them, so a statement sent into a partition may
still reach the server after the partition heals, long after its sender gave up on it.
That late arrival is the fault these rows exist for (netem is not available here).

- `partition(port)`: every packet to the port is dropped (existing and new connections);
  `both_ways=True`: every packet from it too.
- `partition_connection(port, client_port)`: one TCP connection, cut both ways.
- `partition_at_statement(port, text, ...)`: armed now, it starts with the first packet to
  `port` carrying `text` (a statement): from then on either the whole of `drop_port` is
  partitioned, or only the connection that carried the statement (`scope="connection"`).
  The returned trigger says when it fired, so the partition's length is measured from the
  statement, not from when it was armed.
- `freeze(pid)`: SIGSTOP, and SIGCONT on the way out.

Every rule carries a comment starting with RULE_TAG and the adding process's id;
`remove_leftovers()` removes the ones a harness left behind (its own, by default).
"""

from __future__ import annotations

import itertools
import os
import shlex
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Literal

from dbmigrate.exceptions import DbmigrateError

Run = Callable[[list[str]], str]  # iptables arguments (without `iptables -w`) -> stdout
RULE_TAG = "dbmigrate-fault"
RECENT_DIR = Path("/proc/net/xt_recent")
_serial = itertools.count(1)


class FaultError(DbmigrateError):
    """A fault could not be injected or undone."""


def iptables(args: list[str]) -> str:
    """`iptables -w ARGS` (waits for the xtables lock other users of the machine may hold)."""
    try:
        done = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FaultError(f"iptables {' '.join(args)}: {e}") from None
    if done.returncode != 0:
        raise FaultError(f"iptables {' '.join(args)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def _name() -> str:
    """A name of its own for each fault (comment, recent list, connection mark)."""
    return f"{own_tag()}{next(_serial)}"


def _port(port: int) -> str:
    if not isinstance(port, int) or not 0 < port < 65536:
        raise FaultError(f"not a TCP port: {port!r}")
    return str(port)


class Rules:
    """Rules added one by one, removed together (last first), also when adding one failed."""

    def __init__(self, run: Run = iptables):
        self.run = run
        self.added: list[list[str]] = []

    def add(self, spec: list[str]) -> None:
        self.run(["-I", *spec])  # first in the chain: ahead of anything that would accept
        self.added.append(spec)

    def remove_all(self) -> None:
        errors = []
        for spec in reversed(self.added):
            try:
                self.run(["-D", *spec])
            except FaultError as e:
                errors.append(e.message)
        self.added.clear()
        if errors:
            raise FaultError("could not remove fault rule(s): " + "; ".join(errors),
                             hint=f"remove them by hand: iptables -w -S INPUT | grep {RULE_TAG}")


def _to(port: int) -> list[str]:
    return ["INPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", _port(port)]


@contextmanager
def _rules(run: Run) -> Iterator[Rules]:
    rules = Rules(run)
    try:
        yield rules
    finally:
        rules.remove_all()


@contextmanager
def partition(port: int, *, both_ways: bool = False, run: Run = iptables) -> Iterator[None]:
    """Every packet to `port` dropped until the block ends; `both_ways`: every packet from it
    too (the server's replies and the binlog it streams to replicas)."""
    name = _name()
    with _rules(run) as rules:
        rules.add([*_to(port), "-m", "comment", "--comment", name, "-j", "DROP"])
        if both_ways:
            rules.add(["INPUT", "-p", "tcp", "-s", "127.0.0.1", "--sport", _port(port),
                       "-m", "comment", "--comment", name, "-j", "DROP"])
        yield


@contextmanager
def partition_connection(port: int, client_port: int, *, run: Run = iptables) -> Iterator[None]:
    """One connection to `port` (from `client_port` on loopback) cut both ways: a replica's
    link carries its data from the server to the client, which dropping requests alone
    would let through."""
    name = _name()
    with _rules(run) as rules:
        rules.add([*_to(port), "--sport", _port(client_port), "-m", "comment", "--comment", name, "-j", "DROP"])
        rules.add(["INPUT", "-p", "tcp", "-s", "127.0.0.1", "--sport", _port(port), "--dport", _port(client_port),
                   "-m", "comment", "--comment", name, "-j", "DROP"])
        yield


class Trigger:
    """When the first packet carrying the statement reached the rule (an xt_recent list)."""

    def __init__(self, name: str, recent_dir: Path = RECENT_DIR):
        self.name = name
        self.path = recent_dir / name
        self.fired_at: float | None = None  # time.monotonic() when first seen fired

    def fired(self) -> bool:
        if self.fired_at is None:
            try:
                seen = bool(self.path.read_text().strip())
            except OSError:
                seen = False
            if seen:
                self.fired_at = time.monotonic()
        return self.fired_at is not None

    def wait(self, timeout_s: float, alive: Callable[[], bool] = lambda: True, poll_s: float = 0.005) -> bool:
        """Has it fired within `timeout_s` (stops early once `alive()` is false and it has not)?"""
        deadline = time.monotonic() + timeout_s
        while not self.fired():
            if time.monotonic() >= deadline or not alive():
                return self.fired()
            time.sleep(poll_s)
        return True


Scope = Literal["port", "connection"]


@contextmanager
def partition_at_statement(port: int, text: str, *, scope: Scope = "port", drop_port: int | None = None,
                           run: Run = iptables, recent_dir: Path = RECENT_DIR) -> Iterator[Trigger]:
    """Armed until the block ends; starts at the first packet to `port` carrying `text`.

    scope="port": from that packet on, every packet to `drop_port` (default `port`) is
    dropped, the statement's own included when it is the same port. scope="connection":
    that packet and every later one of its connection are dropped (other sessions, and new
    ones, pass: the server stays reachable for a KILL)."""
    if not text:
        raise FaultError("a statement partition needs the statement's text")
    drop_port = port if drop_port is None else drop_port
    if scope == "connection" and drop_port != port:
        raise FaultError("a connection partition drops the connection that carried the statement: same port")
    name = _name()
    match = ["-m", "string", "--string", text, "--algo", "bm"]
    mark = str(int.from_bytes(os.urandom(3), "big") | 0x1000000)
    with _rules(run) as rules:
        if scope == "connection":
            rules.add([*_to(port), "-m", "connmark", "--mark", mark, "-m", "comment", "--comment", name, "-j", "DROP"])
            rules.add([*_to(port), *match, "-m", "recent", "--name", name, "--set",
                       "-m", "comment", "--comment", name, "-j", "CONNMARK", "--set-mark", mark])
        elif scope == "port":
            rules.add([*_to(drop_port), "-m", "recent", "--name", name, "--rcheck",
                       "-m", "comment", "--comment", name, "-j", "DROP"])
            # The statement's packet marks the start; it is dropped by the rule above when
            # it goes to the partitioned port (the list is set first: the next rule sees it).
            rules.add([*_to(port), *match, "-m", "recent", "--name", name, "--set",
                       "-m", "comment", "--comment", name])
        else:
            raise FaultError(f"unknown partition scope {scope!r}")
        yield Trigger(name, recent_dir)


def own_tag(pid: int | None = None) -> str:
    """The start of the comment of every rule process `pid` (default: this one) adds."""
    return f"{RULE_TAG}-{os.getpid() if pid is None else pid}-"


def remove_leftovers(run: Run = iptables, *, pid: int | None = None, any_process: bool = False) -> int:
    """Remove the rules this process (or process `pid`, or with `any_process` every process
    using this module, e.g. one that was killed) added that are still in INPUT. Returns how
    many were removed."""
    tag = RULE_TAG if any_process else own_tag(pid)
    removed = 0
    for line in run(["-S", "INPUT"]).splitlines():
        if tag not in line or not line.startswith("-A INPUT"):
            continue
        run(["-D", *shlex.split(line)[1:]])
        removed += 1
    return removed


@contextmanager
def freeze(pid: int) -> Iterator[None]:
    """The process stopped (SIGSTOP) until the block ends, then continued (SIGCONT)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # killed meanwhile: nothing left to thaw


def client_ports(pid: int, server_port: int, proc: Path = Path("/proc")) -> list[int]:
    """Local ports of `pid`'s established TCP connections to 127.0.0.1:`server_port`."""
    inodes = set()
    try:
        for fd in (proc / str(pid) / "fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return []
    out = []
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / str(pid) / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            local, remote, state, inode = f[1], f[2], f[3], f[9]
            if inode in inodes and state == "01" and int(remote.rsplit(":", 1)[1], 16) == server_port:
                out.append(int(local.rsplit(":", 1)[1], 16))
    return sorted(out)
