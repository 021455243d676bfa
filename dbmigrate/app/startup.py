"""What a command that runs a procedure does first, before it loads anything else."""

from __future__ import annotations

from dbmigrate import pacing, priority


def yield_cores_until_the_fence(pace: bool = True) -> None:
    """The run's start-up and preflight yield the cores to a server or application sharing them,
    until the first fenced window: a lower priority on request (dbmigrate.priority), and on a busy
    host a share of the CPU in short bursts (dbmigrate.pacing)."""
    priority.begin_run()
    if pace:
        pacing.begin()
