"""The one redactor: everything that leaves the process (console, JSON output, logs,
journal, reports, error messages) passes through `redact`.

Two layers: secret values registered when credentials are loaded are masked
wherever they appear, and password-shaped clauses in SQL, option text, DSNs and
URLs are masked by pattern even when the value was never registered (a password
hash replayed from SHOW CREATE USER, say).
"""

from __future__ import annotations

import re
import threading
from typing import Any, overload

MASK = "'***'"

_QUOTED = r"""(?:'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")"""
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # CREATE USER ... IDENTIFIED [WITH plugin] BY|AS [PASSWORD] '...', IDENTIFIED VIA x USING PASSWORD('...')
    (re.compile(rf"(IDENTIFIED\s+(?:WITH\s+\S+\s+)?(?:BY|AS)\s+(?:PASSWORD\s+)?){_QUOTED}", re.I), rf"\1{MASK}"),
    # CHANGE MASTER / CHANGE REPLICATION SOURCE ... PASSWORD='...'
    (re.compile(rf"((?:MASTER|SOURCE)_PASSWORD\s*=\s*){_QUOTED}", re.I), rf"\1{MASK}"),
    # SET PASSWORD [FOR user] = '...' | = PASSWORD('...')
    (re.compile(rf"(SET\s+PASSWORD\b[^=]*=\s*(?:PASSWORD\s*\(\s*)?){_QUOTED}", re.I), rf"\1{MASK}"),
    (re.compile(rf"(\bPASSWORD\s*\(\s*){_QUOTED}", re.I), rf"\1{MASK}"),
    # scheme://user:password@host
    (re.compile(r"(://[^:/\s@]+:)[^@\s]+(@)"), r"\1***\2"),
    # password=..., --password=..., "password": "...", pwd=... in DSNs, argv, option files and key/values
    (re.compile(rf"""(\b(?:password|passwd|pwd)\b["']?\s*[=:]\s*)(?:{_QUOTED}|[^\s;,&'"]+)""", re.I), r"\1***"),
]

_lock = threading.Lock()
_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a secret value so that it is masked wherever it shows up."""
    if value:
        with _lock:
            _secrets.add(value)


@overload
def redact(text: str) -> str: ...
@overload
def redact(text: None) -> None: ...
def redact(text: str | None) -> str | None:
    if not text:
        return text
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return mask_known(text)


def mask_known(text: str) -> str:
    """Mask the registered secret values, longest first so that no part of one is left over."""
    if not text:
        return text
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if len(secret) >= 3:
            text = text.replace(secret, "***")
        else:  # a very short secret is masked only as a whole word, so text stays readable
            text = re.sub(rf"(?<![\w]){re.escape(secret)}(?![\w])", "***", text)
    return text


def redact_json(value: Any) -> Any:
    """redact() applied to every string inside a JSON-shaped value."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return redact_json_object(value)
    if isinstance(value, (list, tuple)):
        return [redact_json(v) for v in value]
    return value


def redact_json_object(value: dict[str, Any]) -> dict[str, Any]:
    """redact_json() of a JSON object, typed as one."""
    return {k: redact_json(v) for k, v in value.items()}
