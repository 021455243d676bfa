"""Stream a program's output on one host into a program on another.

The bytes pass through this process's pipe between the two clients (ssh or
local), never through a file on the ops host.
"""

from __future__ import annotations

import subprocess
import threading
from typing import IO, Callable, Sequence

from dbmigrate.hosts.base import DEFAULT_TIMEOUT, Drain, Host, piped
from dbmigrate.hosts.errors import HostTimeout


Relay = Callable[[IO[bytes], IO[bytes]], None]  # copies producer output into consumer input (may pace it)


def stream(src: Host, src_argv: Sequence[str], dst: Host, dst_argv: Sequence[str], *,
           timeout: float = DEFAULT_TIMEOUT, what: str | None = None, relay: Relay | None = None,
           on_stderr_line: Callable[[str], None] | None = None) -> bytes:
    """Run `src_argv` on `src` piped into `dst_argv` on `dst`; returns dst's stdout.

    A failure on either side stops both and raises the first side's error, so a
    dying reader does not leave the writer blocked and vice versa. With `relay`,
    the bytes pass through it in this process (to count, pace or pause them).
    With `on_stderr_line`, each line the producer writes to stderr is passed on as it
    is written (what phase a backup is in), and still reported on failure.
    """
    what = what or f"stream `{src_argv[0]}` on {src.name} into `{dst_argv[0]}` on {dst.name}"
    if relay is not None:
        return _relayed(src, src_argv, dst, dst_argv, timeout, what, relay, on_stderr_line)
    producer = src.popen(src_argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        consumer = dst.popen(dst_argv, stdin=producer.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except BaseException:
        producer.kill()
        producer.wait()
        raise
    piped(producer.stdout).close()  # the consumer holds it now; the producer sees SIGPIPE if the consumer dies
    perr = Drain(piped(producer.stderr), on_stderr_line)
    try:
        out, cerr = consumer.communicate(timeout=timeout)
        producer.wait(timeout=max(1.0, timeout / 10))
    except subprocess.TimeoutExpired:
        for p in (producer, consumer):
            p.kill()
            p.wait()
        raise HostTimeout(f"{what}: did not finish within {timeout:g} s",
                          hint="check both hosts and the network; raise the timeout for large transfers") from None
    return _outcome(src, src_argv, dst, dst_argv, what, producer, perr.text(), consumer, cerr.decode(errors="replace"),
                    out)


def _relayed(src: Host, src_argv: Sequence[str], dst: Host, dst_argv: Sequence[str], timeout: float, what: str,
             relay: Relay, on_stderr_line: Callable[[str], None] | None = None) -> bytes:
    producer = src.popen(src_argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        consumer = dst.popen(dst_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except BaseException:
        producer.kill()
        producer.wait()
        raise
    src_out, dst_in = piped(producer.stdout), piped(consumer.stdin)
    perr = Drain(piped(producer.stderr), on_stderr_line)
    cout, cerr = Drain(piped(consumer.stdout)), Drain(piped(consumer.stderr))
    failed: list[BaseException] = []

    def pump() -> None:
        try:
            relay(src_out, dst_in)
        except BrokenPipeError:
            pass  # the consumer died: its exit status tells why
        except BaseException as e:  # noqa: BLE001 - reported after both sides stopped
            failed.append(e)
        finally:
            if failed or consumer.poll() is not None:
                producer.kill()  # nobody will read the rest
            for f in (src_out, dst_in):
                try:
                    f.close()
                except OSError:
                    pass

    t = threading.Thread(target=pump, daemon=True, name="stream-relay")
    t.start()
    t.join(timeout)
    if t.is_alive():
        for p in (producer, consumer):
            p.kill()
        t.join(10)
        for p in (producer, consumer):
            p.wait()
        raise HostTimeout(f"{what}: did not finish within {timeout:g} s",
                          hint="check both hosts and the network; raise the timeout for large transfers")
    try:
        consumer.wait(timeout=max(10.0, timeout / 10))
        producer.wait(timeout=10)
    except subprocess.TimeoutExpired:
        for p in (producer, consumer):
            p.kill()
            p.wait()
        raise HostTimeout(f"{what}: a side did not exit after the stream ended") from None
    if failed:
        consumer.kill()
        raise failed[0]
    return _outcome(src, src_argv, dst, dst_argv, what, producer, perr.text(), consumer, cerr.text(),
                    bytes(cout.data()))


def _outcome(src: Host, src_argv: Sequence[str], dst: Host, dst_argv: Sequence[str], what: str,
             producer: subprocess.Popen[bytes], perr_text: str, consumer: subprocess.Popen[bytes], cerr_text: str,
             out: bytes) -> bytes:
    if producer.returncode != 0:
        if consumer.returncode == 0:
            # The consumer took a truncated stream: report the producer.
            raise src.failure(src_argv, what, producer.returncode, perr_text, started=True)
        # Both failed: the consumer's error usually explains the producer's SIGPIPE.
        if producer.returncode not in (-13, 141):
            raise src.failure(src_argv, what, producer.returncode, perr_text, started=True)
    if consumer.returncode != 0:
        raise dst.failure(dst_argv, what, consumer.returncode, cerr_text, started=True)
    return out
