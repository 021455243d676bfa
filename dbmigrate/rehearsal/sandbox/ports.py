"""Free loopback ports for new instances."""

from __future__ import annotations

import socket


def free_port(taken: set[int] | None = None) -> int:
    """A port nobody listens on right now (the kernel picks from the ephemeral range)."""
    taken = taken or set()
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in taken:
            return port
    raise RuntimeError("no free port found on 127.0.0.1")


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_port_range(n: int) -> int:
    """First of `n` consecutive free ports below the kernel's ephemeral range, so that no
    client connection takes one of them between now and when the instances bind them
    (planned instances listen at base, base+1, ...)."""
    import random

    lo, _ = _ephemeral_range()
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(10000, max(10001, lo - n))
        if not any(port_in_use(base + i) for i in range(n)):
            return base
    raise RuntimeError(f"no {n} consecutive free ports found below {lo}")
