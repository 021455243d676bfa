"""The wire tap: `tcpdump` of a server's MySQL port on the server's host (reached through
hosts/: local, ssh, docker), its pcap stream piped here into Debian's `tshark`, which
dissects the MySQL protocol (COM_QUERY text, COM_STMT_PREPARE text, COM_STMT_EXECUTE
statement ids, the handshake's user and schema, COM_INIT_DB). No protocol parser of ours:
tshark's fields come out one frame a line, and digest/wire_dissect.py pairs them.

Its cost is bounded on the host: a snap length, a duration (`timeout`, which stops
tcpdump on its own even if the tool dies), a number of bytes (counted here; the tap is
stopped past it), and the lowest CPU and I/O priority (nice 19, ionice idle where present).
The capture is never written to disk: it streams from the host to tshark.
"""

from __future__ import annotations

import io
import queue
import re
import shlex
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator

from dbmigrate.exceptions import DbmigrateError
from dbmigrate.hosts import Host
from dbmigrate.hosts.base import Drain, piped

SEPARATOR = "\x1f"  # unit separator: never in an SQL text tshark prints
FIELDS = ("frame.time_epoch", "tcp.stream", "tcp.srcport", "tcp.len", "mysql.command", "mysql.query",
          "mysql.stmt_id", "mysql.schema", "mysql.user", "mysql.error_code")
DEFAULT_SNAP = 16384  # a statement up to 16 KB is seen whole; longer result frames are cut
DEFAULT_MAX_BYTES = 512 * 1024 * 1024
BUFFER_KIB = 16384  # the kernel's capture buffer: 16 MB absorbs a burst while tcpdump (nice 19) waits for a core
# Runs the program at the lowest I/O priority where ionice exists (util-linux), as-is elsewhere.
_LOW_IO = 'if command -v ionice >/dev/null 2>&1; then exec ionice -c 3 "$@"; else exec "$@"; fi'


class WireUnavailable(DbmigrateError):
    """The wire cannot be read here (no tcpdump or tshark, or no right to capture)."""


@dataclass
class TapLimits:
    seconds: float
    snap: int = DEFAULT_SNAP
    max_bytes: int = DEFAULT_MAX_BYTES
    interface: str = "any"


def tcpdump_argv(port: int, limits: TapLimits, *, count: int | None = None) -> list[str]:
    """tcpdump of `port` for at most `limits.seconds` (+1 s to flush), pcap to stdout, at low priority."""
    seconds = max(1, int(limits.seconds + 1.999))
    argv = ["timeout", "--signal=INT", str(seconds), "nice", "-n", "19", "sh", "-c", _LOW_IO, "sh",
            "tcpdump", "-i", limits.interface, "-s", str(int(limits.snap)), "-B", str(BUFFER_KIB), "-U", "-n",
            "-w", "-"]
    if count is not None:
        argv += ["-c", str(count)]
    return argv + [f"tcp port {int(port)}"]


def tshark_argv(port: int) -> list[str]:
    argv = ["tshark", "-l", "-n", "-r", "-", "-d", f"tcp.port=={int(port)},mysql", "-T", "fields",
            "-E", f"separator={SEPARATOR}", "-E", "occurrence=f", "-E", "quote=n"]
    for f in FIELDS:
        argv += ["-e", f]
    return argv


def check_available(host: Host, port: int, interface: str = "any") -> None:
    """Before any window opens: tshark here, tcpdump on the host, and the right to capture
    there (root or CAP_NET_RAW). A one-second probe that captures nothing it keeps."""
    if shutil.which("tshark") is None:
        raise WireUnavailable("tshark is not installed on this machine: the wire window dissects with it",
                              hint="install it: DEBIAN_FRONTEND=noninteractive apt-get install -y tshark")
    # At most one packet for at most a second: enough to know whether capturing is allowed.
    probe = tcpdump_argv(port, TapLimits(seconds=0, interface=interface), count=1)
    res = host.run(probe, timeout=30, what="probe tcpdump", check=False)
    err = res.stderr.strip()
    if res.returncode in (0, 124):
        return
    if "not found" in err or res.returncode == 127:
        raise WireUnavailable(f"{host.name}: tcpdump is not installed on the server's host",
                              hint="install it there: apt-get install -y tcpdump")
    if "permission" in err.lower() or "operation not permitted" in err.lower():
        raise WireUnavailable(f"{host.name}: no right to capture on {interface} (tcpdump needs root or "
                              "CAP_NET_RAW on the server's host)",
                              hint="run as root there, or: setcap cap_net_raw,cap_net_admin=eip $(command -v "
                                   "tcpdump); or choose --window slow_log")
    raise WireUnavailable(f"{host.name}: tcpdump cannot capture port {port} on {interface}: "
                          f"{err.splitlines()[-1] if err else 'exit ' + str(res.returncode)}",
                          hint="check the interface (the server's address) and tcpdump on the host")


@dataclass
class TapStats:
    bytes: int = 0
    truncated: bool = False  # stopped at max_bytes
    tcpdump: str = ""
    tshark: str = ""
    dropped_by_kernel: int = 0  # packets tcpdump says the kernel dropped (its buffer was full)
    unfinished: bool = False  # tshark had not dissected everything when its time was up


class WireTap:
    """tcpdump on the host -> (bytes counted here) -> tshark here -> `on_line` per frame."""

    def __init__(self, host: Host, port: int, limits: TapLimits, on_line: Callable[[list[str]], None]):
        self.host, self.port, self.limits, self.on_line = host, port, limits, on_line
        self.stats = TapStats()
        self._dump: subprocess.Popen[bytes] | None = None
        self._shark: subprocess.Popen[bytes] | None = None
        self._threads: list[threading.Thread] = []
        self._dump_err: Drain | None = None
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._shark_err: Drain | None = None

    def start(self) -> "WireTap":
        self._dump = self.host.popen(tcpdump_argv(self.port, self.limits), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            self._shark = subprocess.Popen(["nice", "-n", "19", *tshark_argv(self.port)], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except FileNotFoundError:
            self._dump.kill()
            raise WireUnavailable("tshark is not installed on this machine",
                                  hint="install it: DEBIAN_FRONTEND=noninteractive apt-get install -y tshark") from None
        self._dump_err, self._shark_err = Drain(piped(self._dump.stderr)), Drain(piped(self._shark.stderr))
        self._threads = [threading.Thread(target=self._pump, daemon=True),
                         threading.Thread(target=self._feed, daemon=True),
                         threading.Thread(target=self._read, daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def _pump(self) -> None:
        """Reads tcpdump as fast as it writes (a tshark behind on a busy machine must not make
        tcpdump block and the kernel drop packets): chunks wait in memory, at most max_bytes."""
        assert self._dump
        src = self._dump.stdout
        try:
            if not isinstance(src, io.BufferedIOBase):  # Popen's pipes are buffered (bufsize -1): read1 is there
                raise TypeError("tcpdump's output is not a buffered pipe")
            while chunk := src.read1(1 << 16):
                self.stats.bytes += len(chunk)
                self._queue.put(chunk)
                if self.stats.bytes >= self.limits.max_bytes:
                    self.stats.truncated = True
                    self._dump.kill()
                    break
        except (OSError, ValueError):
            pass
        finally:
            self._queue.put(None)

    def _feed(self) -> None:
        assert self._shark
        dst = piped(self._shark.stdin)
        try:
            while (chunk := self._queue.get()) is not None:
                dst.write(chunk)
                dst.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass
        finally:
            try:
                dst.close()
            except OSError:
                pass

    def _read(self) -> None:
        assert self._shark
        for raw in piped(self._shark.stdout):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            if line:
                self.on_line(line.split(SEPARATOR))

    def stop(self, timeout: float = 180.0) -> TapStats:
        """Stop tcpdump (the host side ends on its own at its `timeout` too), let tshark finish."""
        if self._dump is None:
            return self.stats
        if self._dump.poll() is None:
            self._dump.send_signal(2)  # SIGINT: tcpdump writes what it holds and exits
            try:
                self._dump.wait(5)
            except subprocess.TimeoutExpired:
                self._dump.kill()
                self._dump.wait()
        # tshark runs at the lowest priority: on a busy machine it may still be dissecting the
        # backlog; it is given time to finish (bounded) and said to be unfinished otherwise.
        for t in self._threads:
            t.join(timeout)
        if self._shark and self._shark.poll() is None:
            try:
                self._shark.wait(5)
            except subprocess.TimeoutExpired:
                self.stats.unfinished = True
                self._shark.kill()
                self._shark.wait()
        self.stats.tcpdump = self._dump_err.text().strip() if self._dump_err else ""
        self.stats.tshark = "\n".join(ln for ln in (self._shark_err.text() if self._shark_err else "").splitlines()
                                      if "dangerous" not in ln).strip()
        dropped = re.search(r"(\d+) packets? dropped by kernel", self.stats.tcpdump)
        self.stats.dropped_by_kernel = int(dropped.group(1)) if dropped else 0
        self._dump = None
        return self.stats

    def alive(self) -> bool:
        return self._dump is not None and self._dump.poll() is None


def describe(port: int, limits: TapLimits) -> str:
    return shlex.join(tcpdump_argv(port, limits))


def frames(lines: Iterator[str]) -> Iterator[list[str]]:
    """tshark's field lines (a saved run) as frames, for tests and offline dissection."""
    for line in lines:
        line = line.rstrip("\n")
        if line:
            yield line.split(SEPARATOR)

