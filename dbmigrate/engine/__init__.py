"""The runbook engine: steps, gates, runner, journal, cluster lock, events.

It knows nothing of MySQL (the cluster lock holds a server's named locks through a
protocol that dbmigrate.db implements). Procedure authors mostly need the names
re-exported here.
"""

from dbmigrate.engine import collector
from dbmigrate.engine.events import (
    EventBus,
    GateDecided,
    GateWaiting,
    HookFinished,
    Log,
    Metric,
    PhaseStarted,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
)
from dbmigrate.engine.journal import Journal, default_journal_path, new_run_id
from dbmigrate.redact import redact, register_secret
from dbmigrate.engine.lock import ClusterLock
from dbmigrate.engine.runner import Runner, RunOutcome, StepFailed
from dbmigrate.engine.step import AutoGate, FunctionStep, ManualGate, Phase, Procedure, RunContext, Step
from dbmigrate.clock import Clock, FakeClock, retry, throttle, wait_until

__all__ = [
    "AutoGate", "Clock", "ClusterLock", "collector", "EventBus", "FakeClock", "FunctionStep", "GateDecided", "GateWaiting",
    "HookFinished", "Journal", "Log", "ManualGate", "Metric", "Phase", "PhaseStarted", "Procedure",
    "RunContext", "RunFinished", "RunOutcome", "RunStarted", "Runner", "Step", "StepFailed", "StepFinished",
    "StepStarted", "default_journal_path", "new_run_id", "redact", "register_secret", "retry", "throttle",
    "wait_until",
]
