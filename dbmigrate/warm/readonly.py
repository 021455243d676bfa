"""Which statements are safe to replay against a server that is about to take traffic.

Only plain reads: a SELECT (or WITH ... SELECT) that neither locks, writes to a
file or variable, sleeps, takes user locks nor advances a sequence. The check
runs on the text with string literals and comments blanked out, so a word inside
a literal ('... for update ...') does not count.
"""

from __future__ import annotations

import re

_LITERALS = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`")
_COMMENTS = re.compile(r"/\*(?!\+).*?\*/|--[ \t][^\n]*|#[^\n]*", re.S)

_REFUSED = [
    (re.compile(r"\bFOR\s+UPDATE\b"), "locks rows (FOR UPDATE)"),
    (re.compile(r"\bFOR\s+SHARE\b|\bLOCK\s+IN\s+SHARE\s+MODE\b"), "locks rows (shared lock)"),
    (re.compile(r"\bINTO\b"), "writes its result somewhere (INTO)"),
    (re.compile(r"\b(SLEEP|BENCHMARK)\s*\("), "sleeps or burns CPU on purpose"),
    (re.compile(r"\b(GET_LOCK|RELEASE_LOCK|RELEASE_ALL_LOCKS)\s*\("), "takes user locks"),
    (re.compile(r"\b(NEXTVAL|SETVAL|LASTVAL)\s*\(|\bNEXT\s+VALUE\s+FOR\b"), "advances a sequence"),
    (re.compile(r"\bLOAD_FILE\s*\("), "reads server files"),
]


def normalise(sql: str) -> str:
    """Upper-case text with literals blanked and comments removed (optimizer hints kept)."""
    text = _COMMENTS.sub(" ", _LITERALS.sub("''", sql))
    return " ".join(text.split()).upper()


def refusal(sql: str) -> str | None:
    """None when `sql` may be replayed, else the reason why not."""
    text = normalise(sql)
    if not text:
        return "empty statement"
    if ";" in text.rstrip(";"):
        return "more than one statement"
    words = text.lstrip("( ").split(None, 1)
    first = words[0] if words else "("
    if first not in ("SELECT", "WITH"):
        return f"not a SELECT ({first})"
    if first == "WITH" and re.search(r"\b(UPDATE|DELETE|INSERT|REPLACE)\b", text):
        return "WITH ... writes rows"
    for pattern, reason in _REFUSED:
        if pattern.search(text):
            return reason
    return None
