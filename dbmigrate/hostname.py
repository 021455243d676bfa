"""What may be written as a server's address: an IP address, or a DNS name whose
labels fit DNS's limits (63 bytes each, 253 in all). Checked where an address is
read, so that a typo is one line naming the field instead of an encoding error
from deep inside the resolver."""

from __future__ import annotations

import ipaddress
import re

_LABEL = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?$")


def host_problem(host: str) -> str | None:
    """Why `host` cannot be a server address, or None when it can."""
    if not host or not host.strip():
        return "is empty; give a host name or IP address"
    try:
        ipaddress.ip_address(host.strip("[]"))
        return None
    except ValueError:
        pass
    name = host.removesuffix(".")
    if len(name) > 253:
        return f"is {len(name)} characters long; a host name has at most 253"
    for label in name.split("."):
        if len(label) > 63:
            return f"has a label of {len(label)} characters ({label[:12]}…); DNS allows at most 63 per label"
        if not _LABEL.match(label):
            return f"is not a host name or IP address (label {label!r})"
    return None


def check_host(host: str) -> str:
    """`host` unchanged, or ValueError saying what is wrong (for pydantic validators)."""
    problem = host_problem(host)
    if problem:
        raise ValueError(f"host {problem}")
    return host
