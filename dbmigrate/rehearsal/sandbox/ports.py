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
