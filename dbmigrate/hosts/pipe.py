"""Stream a program's output on one host into a program on another.

The bytes pass through this process's pipe between the two clients (ssh or
local), never through a file on the ops host.
"""

from __future__ import annotations

import subprocess
from typing import Sequence

from dbmigrate.hosts.base import DEFAULT_TIMEOUT, Drain, Host
from dbmigrate.hosts.errors import HostTimeout


def stream(src: Host, src_argv: Sequence[str], dst: Host, dst_argv: Sequence[str], *,
           timeout: float = DEFAULT_TIMEOUT, what: str | None = None) -> bytes:
    """Run `src_argv` on `src` piped into `dst_argv` on `dst`; returns dst's stdout.

    A failure on either side stops both and raises the first side's error, so a
    dying reader does not leave the writer blocked and vice versa.
    """
    what = what or f"stream `{src_argv[0]}` on {src.name} into `{dst_argv[0]}` on {dst.name}"
    producer = src._popen(src_argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        consumer = dst._popen(dst_argv, stdin=producer.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except BaseException:
        producer.kill()
        producer.wait()
        raise
    producer.stdout.close()  # the consumer holds it now; the producer sees SIGPIPE if the consumer dies
    perr = Drain(producer.stderr)
    try:
        out, cerr = consumer.communicate(timeout=timeout)
        producer.wait(timeout=max(1.0, timeout / 10))
    except subprocess.TimeoutExpired:
        for p in (producer, consumer):
            p.kill()
            p.wait()
        raise HostTimeout(f"{what}: did not finish within {timeout:g} s",
                          hint="check both hosts and the network; raise the timeout for large transfers") from None
    cerr_text = cerr.decode(errors="replace")
    if producer.returncode != 0:
        if consumer.returncode == 0:
            # The consumer took a truncated stream: report the producer.
            raise src._failure(src_argv, what, producer.returncode, perr.text(), started=True)
        # Both failed: the consumer's error usually explains the producer's SIGPIPE.
        if producer.returncode not in (-13, 141):
            raise src._failure(src_argv, what, producer.returncode, perr.text(), started=True)
    if consumer.returncode != 0:
        raise dst._failure(dst_argv, what, consumer.returncode, cerr_text, started=True)
    return out
