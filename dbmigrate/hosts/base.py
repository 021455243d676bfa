"""A server's host, reached by running programs on it.

Every operation is a program run on the host (cat, tail, df, sh, rm), started
through `command()`: as-is for the local machine, wrapped in ssh for a remote
one. So local and remote hosts share one code path, and what works in a
rehearsal on one machine is what runs against real hosts.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator, Sequence, Union

from dbmigrate.hosts.errors import HostError, HostTimeout, ProgramMissing, classify_program_failure

DEFAULT_TIMEOUT = 60.0
CHUNK = 1 << 16
Redirect = Union[int, IO[bytes], None]  # a child's stdin/stdout/stderr: PIPE, DEVNULL, a stream, or inherited

# Installs stdin as PATH atomically: a temp file in the same directory, size
# checked (a dropped connection gives EOF, not an error), mode and owner set,
# then renamed. The temp file is removed on every failure.
_ATOMIC_WRITE = r"""
p=$1; t=$2; n=$3; m=$4; o=$5
trap 'rm -f -- "$t"' EXIT
trap 'exit 1' HUP INT TERM PIPE
umask 077
cat > "$t" || exit 1
s=$(wc -c < "$t") || exit 1
if [ "$s" -ne "$n" ]; then echo "short write: got $s of $n bytes" >&2; exit 75; fi
chmod "$m" "$t" || exit 1
if [ -n "$o" ]; then chown -- "$o" "$t" || exit 1; fi
sync -- "$t" 2>/dev/null
mv -f -- "$t" "$p" || exit 1
trap - EXIT
"""


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: bytes
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout.decode(errors="replace")


class Host:
    """Where a server runs. Subclasses say how a program is started there."""

    kind = "abstract"

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    # -- what subclasses provide -------------------------------------------------
    def command(self, argv: Sequence[str]) -> list[str]:
        """The local argv that runs `argv` on this host."""
        raise NotImplementedError

    def _transport_failure(self, returncode: int, stderr: str, started: bool) -> HostError | None:
        """An error when the failure was the way to the host, not the program."""
        return None

    def close(self) -> None:
        """Release connections (nothing to do for a local host)."""

    # -- running programs ------------------------------------------------------
    def popen(self, argv: Sequence[str], *, stdin: Redirect = None, stdout: Redirect = None,
              stderr: Redirect = None) -> subprocess.Popen[bytes]:
        """Start `argv` on the host with its pipes as given (for streams between hosts)."""
        try:
            return subprocess.Popen(self.command(argv), stdin=stdin, stdout=stdout, stderr=stderr)
        except FileNotFoundError:
            prog = self.command(argv)[0]
            raise ProgramMissing(f"{self.name}: `{prog}` is not installed on this machine",
                                 hint=f"install {prog}") from None

    def failure(self, argv: Sequence[str], what: str, returncode: int, stderr: str,
                started: bool = False) -> HostError:
        """The error for a program that exited `returncode` here: the way to the host, or the program."""
        return (self._transport_failure(returncode, stderr, started)
                or classify_program_failure(self.name, what, argv[0], returncode, stderr))

    def run(self, argv: Sequence[str], *, input: bytes | None = None, timeout: float = DEFAULT_TIMEOUT,
            what: str | None = None, check: bool = True) -> Completed:
        """Run a program on the host and capture its output. Secrets go in `input`, never in argv."""
        what = what or f"run {shlex.join(argv)[:80]}"
        proc = self.popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise HostTimeout(f"{self.name}: did not finish within {timeout:g} s: {what}",
                              hint="check the host's load and the network; raise the timeout if the work is large")
        res = Completed(proc.returncode, out, err.decode(errors="replace"))
        if check and res.returncode != 0:
            raise self.failure(argv, what, res.returncode, res.stderr, started=bool(out))
        return res

    # -- files -----------------------------------------------------------------
    def read_bytes(self, path: str, *, timeout: float = DEFAULT_TIMEOUT) -> bytes:
        return self.run(["cat", "--", path], timeout=timeout, what=f"read {path}").stdout

    def read_from(self, path: str, offset: int, *, timeout: float = DEFAULT_TIMEOUT) -> bytes:
        """What a growing file holds past `offset` (call again with offset + len(result))."""
        if offset < 0:
            raise ValueError("offset must be >= 0")
        return self.run(["tail", "-c", f"+{offset + 1}", "--", path], timeout=timeout,
                        what=f"read {path} from byte {offset}").stdout

    @contextmanager
    def open_read(self, path: str, *, timeout: float = DEFAULT_TIMEOUT, offset: int = 0) -> Iterator[_Counting]:
        """Stream a file: yields a binary stream; the whole read is bounded by `timeout`."""
        argv = ["tail", "-c", f"+{offset + 1}", "--", path] if offset else ["cat", "--", path]
        what = f"read {path}"
        proc = self.popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out = piped(proc.stdout)
        watchdog = _Watchdog(proc, timeout)
        err_reader = Drain(piped(proc.stderr))
        got = _Counting(out)
        try:
            yield got
            abandoned = not got.eof  # the caller stopped early: our closing the pipe is no failure
        except BaseException:
            abandoned = True
            raise
        finally:
            if abandoned:
                proc.kill()
            out.close()
            proc.wait()
            watchdog.cancel()
            stderr = err_reader.text()
        if abandoned:
            return
        if watchdog.fired:
            raise HostTimeout(f"{self.name}: reading {path} did not finish within {timeout:g} s",
                              hint="check the network; raise the timeout for large files")
        if proc.returncode != 0:
            raise self.failure(argv, what, proc.returncode, stderr, started=got.count > 0)

    def fetch(self, path: str, dest: str | Path, *, timeout: float = DEFAULT_TIMEOUT, offset: int = 0) -> int:
        """Copy a host's file to a local file (atomically); returns its size."""
        dest = Path(dest)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        size = 0
        try:
            with os.fdopen(fd, "wb") as out, self.open_read(path, timeout=timeout, offset=offset) as src:
                while chunk := src.read(CHUNK):
                    out.write(chunk)
                    size += len(chunk)
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return size

    def write_bytes(self, path: str, data: bytes, *, mode: int = 0o640, owner: str | None = None,
                    timeout: float = DEFAULT_TIMEOUT) -> None:
        """Install `data` as `path` atomically, with `mode` and (if given) `owner` ("user" or "user:group")."""
        parent, base = os.path.split(path)
        tmp = os.path.join(parent, f".{base}.dbmigrate-{uuid.uuid4().hex[:12]}.tmp")
        self.run(["sh", "-c", _ATOMIC_WRITE, "sh", path, tmp, str(len(data)), format(mode, "o"), owner or ""],
                 input=data, timeout=timeout, what=f"write {path}")

    def remove(self, *paths: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Remove files the tool created (missing ones are fine)."""
        if paths:
            self.run(["rm", "-f", "--", *paths], timeout=timeout, what=f"remove {', '.join(paths)}")

    def exists(self, path: str, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
        return self.run(["test", "-e", path], timeout=timeout, what=f"look for {path}", check=False).returncode == 0

    def tree_bytes(self, path: str, exclude: Sequence[str] = (), *, timeout: float = DEFAULT_TIMEOUT) -> int:
        """Bytes of the files under `path` (their apparent sizes, GNU `du -sb`), leaving out names
        that match the `exclude` shell patterns."""
        out = self.run(["du", "-sb", *(f"--exclude={p}" for p in exclude), "--", path], timeout=timeout,
                       what=f"measure the size of {path}").text
        return parse_du_bytes(out, self.name, path)

    def free_bytes(self, path: str, *, timeout: float = DEFAULT_TIMEOUT) -> int:
        """Bytes available to unprivileged users on the file system holding `path` (POSIX `df -P`)."""
        out = self.run(["df", "-P", "-k", "--", path], timeout=timeout, what=f"measure free space of {path}").text
        return parse_df_available(out, self.name, path)


def piped(stream: IO[bytes] | None) -> IO[bytes]:
    """A child's stream that was asked for with PIPE (subprocess types every stream as optional)."""
    if stream is None:
        raise ValueError("the program was started without a pipe for this stream")
    return stream


def parse_du_bytes(out: str, host: str, path: str) -> int:
    try:
        return int(out.split()[0])
    except (IndexError, ValueError):
        raise HostError(f"{host}: could not read the size of {path} from du's output: {out.strip()[:200]!r}") from None


def parse_df_available(out: str, host: str, path: str) -> int:
    """The 'Available' column of `df -P -k`, in bytes. A long device name may wrap the line."""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    fields = " ".join(lines[1:]).split()
    try:
        return int(fields[3]) * 1024
    except (IndexError, ValueError):
        raise HostError(f"{host}: could not read the free space of {path} from df's output: {out.strip()[:200]!r}") from None


class _Watchdog:
    """Kills a process when its time is up (for streams, where communicate() cannot bound the time)."""

    def __init__(self, proc: subprocess.Popen[bytes], timeout: float):
        self.fired = False
        self._proc = proc
        self._timer = threading.Timer(timeout, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        try:
            self._proc.kill()
        except ProcessLookupError:
            pass

    def cancel(self) -> None:
        self._timer.cancel()


class Drain:
    """Reads a pipe to the end in a thread (stderr must not fill up and block the program)."""

    def __init__(self, pipe: IO[bytes], on_line: Callable[[str], None] | None = None):
        self._buf = bytearray()
        self._pipe = pipe
        self._on_line = on_line
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._on_line is None:
            for chunk in iter(lambda: self._pipe.read(4096), b""):
                self._buf += chunk
            return
        # Line by line as the program writes them: a watcher reacts to a line when it is written.
        for line in iter(self._pipe.readline, b""):
            self._buf += line
            try:
                self._on_line(line.decode(errors="replace").rstrip("\n"))
            except Exception:  # noqa: BLE001 - a failing watcher must not stop the drain (the program would block)
                pass

    def text(self) -> str:
        return self.data().decode(errors="replace")

    def data(self) -> bytes:
        self._thread.join(5)
        return bytes(self._buf)


class _Counting:
    """A read-only stream that counts what passed (did data flow before a failure?)."""

    def __init__(self, raw: IO[bytes]):
        self._raw = raw
        self.count = 0
        self.eof = False

    def read(self, n: int | None = -1) -> bytes:
        b = self._raw.read(-1 if n is None else n)  # None: to the end, as for a file
        self.count += len(b)
        if not b and n != 0 or n is None or n < 0:
            self.eof = True
        return b

    def __iter__(self) -> Iterator[bytes]:
        while chunk := self.read(CHUNK):
            yield chunk
