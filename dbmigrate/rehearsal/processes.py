"""The process tree below a process, from /proc: what the sandbox's sshd, the compose engine and
the benches stop or measure, whatever session or group a child moved to."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable


def parent_pids() -> dict[int, int]:
    """pid -> parent pid of every process now (one that exits while read is left out)."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                out[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return out


def below(parents: dict[int, int], roots: Iterable[int]) -> list[int]:
    """Every process under `roots` given pid -> parent pid, nearer ones first, no root itself."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    roots = list(roots)
    out, seen, todo = [], set(roots), list(roots)
    while todo:
        for child in children.get(todo.pop(0), []):
            if child not in seen:
                seen.add(child)
                out.append(child)
                todo.append(child)
    return out


def descendants(*roots: int) -> list[int]:
    return below(parent_pids(), roots)
