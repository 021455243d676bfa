"""Secret redaction for everything that leaves the process: logs, journal, reports.

Two layers: known secret values registered at load time are masked wherever they
appear, and password-shaped clauses in SQL or option text are masked by pattern
even when the value was never registered.
"""

from __future__ import annotations

import re
import threading

MASK = "'***'"

_lock = threading.Lock()
_secrets: set[str] = set()

_PATTERNS = [
    # IDENTIFIED BY 'x', IDENTIFIED VIA ed25519 USING PASSWORD('x')
    re.compile(r"(IDENTIFIED\s+BY\s+)('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")", re.I),
    re.compile(r"(PASSWORD\s*\(\s*)('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")", re.I),
    # MASTER_PASSWORD='x', SOURCE_PASSWORD = "x"
    re.compile(r"((?:MASTER|SOURCE)_PASSWORD\s*=\s*)('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")", re.I),
    # password=x in option files, DSNs, env dumps
    re.compile(r"(\bpassword\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&]+)", re.I),
]


def register_secret(value: str | None) -> None:
    """Remember a secret value so that it is masked wherever it shows up."""
    if value and len(value) >= 3:
        with _lock:
            _secrets.add(value)


def redact(text: str) -> str:
    if not text:
        return text
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + MASK, text)
    return mask_known(text)


def mask_known(text: str) -> str:
    """Mask only the registered secret values (for callers with patterns of their own)."""
    if not text:
        return text
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, "***")
    return text
