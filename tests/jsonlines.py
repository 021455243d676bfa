"""Reading a command's --json output: JSON lines, each with a `record` key, a summary last."""

from __future__ import annotations

import json
from typing import Any


def records(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def result(stdout: str) -> Any:
    """The command's `result` record's document."""
    found = [r["result"] for r in records(stdout) if r.get("record") == "result"]
    assert len(found) == 1, stdout[-2000:]
    return found[0]


def events(stdout: str) -> list[dict[str, Any]]:
    return [r for r in records(stdout) if r.get("record") == "event"]


def summary(stdout: str) -> dict[str, Any]:
    last = records(stdout)[-1]
    assert last.get("record") == "summary", last
    return last
