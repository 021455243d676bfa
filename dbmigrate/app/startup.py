"""What a command that runs a procedure does first, before it loads anything else."""

from __future__ import annotations

from dbmigrate import priority


def yield_cores_until_the_fence() -> None:
    """The run's start-up and preflight yield the cores to a server or application sharing them,
    until the first fenced window (see dbmigrate.priority)."""
    priority.begin_run()
