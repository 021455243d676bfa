"""The contract procedures are written against: steps, gates, phases, the run context.

A procedure is a flat, ordered list of named steps grouped in phases. Each
step can say whether it is already done (check), do its work and return a
sentence (run), read back its postcondition (verify), compensate (undo) and
show what it would send (describe). Optional parts are None, not no-ops, so
the runner can tell "cannot check" from "checked: not done".
"""

from __future__ import annotations

import dataclasses
import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterator, Sequence, TypeVar, Union

from dbmigrate import priority
from dbmigrate.engine import collector
from dbmigrate.engine.events import Event, Log, Metric
from dbmigrate.clock import Clock

if TYPE_CHECKING:
    from dbmigrate.engine.events import EventBus
    from dbmigrate.engine.journal import Journal
    from dbmigrate.engine.playbook_view import PlaybookView

# describe() lines are SQL/commands; a (server, text) pair names the target.
Described = Union[str, tuple[str, str]]
GateVerdict = tuple[bool, str, dict[str, Any]]

P = TypeVar("P")  # a procedure's params model
R = TypeVar("R")  # a procedure's resources


class Step:
    """Base class for steps with methods; override run and any optional part.

    check(ctx) -> bool        True when the effect is already in place (skip)
    run(ctx) -> str           does the work, returns what it did in one sentence
    verify(ctx) -> None       reads the postcondition back; raises if not met
    undo(ctx) -> str          compensation used by rollback
    describe(ctx) -> list     statements it would send (dry-run of mutating steps)
    """

    name: str = ""
    mutating: bool = True
    # A change that only observes (a slow-log window) and is put back on any exit: a run refused
    # after it has still changed nothing (exit 5), once it is put back.
    observes_only: bool = False
    # Undo this step on rollback even when it did not finish (killed or failed half-way):
    # for steps whose partial effect must not outlive the run, like a fence.
    undo_if_started: bool = False
    # Steps this step runs itself (a fleet step's per-server steps, through `engine.substeps`):
    # each journaled as a step of its own under this step's index, found by rollback and resume
    # by its name like any other step.
    substeps: Sequence["Step"] = ()
    check: Callable[["RunContext[Any, Any]"], bool] | None = None
    verify: Callable[["RunContext[Any, Any]"], None] | None = None
    undo: Callable[["RunContext[Any, Any]"], str | None] | None = None
    describe: Callable[["RunContext[Any, Any]"], Sequence[Described]] | None = None

    def run(self, ctx: "RunContext[Any, Any]") -> str:
        raise NotImplementedError(f"step {type(self).__name__} must implement run(ctx)")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class FunctionStep(Step):
    """A step assembled from plain callables, so a procedure reads as a flat list.

        FunctionStep("fence old primary", run=fence, check=is_fenced,
                     verify=assert_fenced, undo=unfence, describe=fence_sql)
    """

    def __init__(
        self,
        name: str,
        run: Callable[["RunContext[Any, Any]"], str],
        *,
        check: Callable[["RunContext[Any, Any]"], bool] | None = None,
        verify: Callable[["RunContext[Any, Any]"], None] | None = None,
        undo: Callable[["RunContext[Any, Any]"], str | None] | None = None,
        describe: Callable[["RunContext[Any, Any]"], Sequence[Described]] | None = None,
        mutating: bool = True,
        undo_if_started: bool = False,
        observes_only: bool = False,
        substeps: Sequence[Step] = (),
    ) -> None:
        if not name:
            raise ValueError("a step needs a name")
        self.name = name
        self.run = run  # type: ignore[method-assign,assignment]  # instance callable replaces the method
        self.check = check
        self.verify = verify
        self.undo = undo
        self.describe = describe
        self.mutating = mutating
        self.undo_if_started = undo_if_started
        self.observes_only = observes_only
        self.substeps = tuple(substeps)


# Every field a step carries, derived from the class so that a field added to Step
# is copied by `replaced` without anyone remembering to list it.
STEP_FIELDS: tuple[str, ...] = ("run", *Step.__annotations__)


def replaced(step: Step, **changes: Any) -> FunctionStep:
    """A copy of `step` as a FunctionStep with every field kept, except those in `changes`.

        replaced(step, name="fence p1")                      # renamed
        replaced(step, **{f: wrap(getattr(step, f)) ...})   # adapted callables
    """
    unknown = set(changes) - set(STEP_FIELDS)
    if unknown:
        raise TypeError(f"not step fields: {', '.join(sorted(unknown))}")
    copy = FunctionStep(changes.get("name", step.name), changes.get("run", step.run))
    for name in STEP_FIELDS:
        setattr(copy, name, changes[name] if name in changes else getattr(step, name))
    return copy


def with_context(step: Step, adapt: Callable[["RunContext[Any, Any]"], "RunContext[Any, Any]"]) -> FunctionStep:
    """A copy of `step` whose callables receive `adapt(ctx)` instead of the run context;
    every other field (mutating, undo_if_started, ...) is kept as it is."""
    changes: dict[str, Any] = {}
    for name in STEP_FIELDS:
        value = getattr(step, name)
        if callable(value):
            changes[name] = lambda ctx, fn=value: fn(adapt(ctx))
    return replaced(step, **changes)


class Gate:
    """Something that must say yes before a phase starts.

    A gate with pause_on_refusal stands where undoing the run would cost more than
    waiting (e.g. a warm-up check after every server was already changed): its
    refusal pauses the run, undoing nothing, instead of failing it."""

    kind: str = ""
    pause_on_refusal: bool = False

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class AutoGate(Gate):
    """Decided by code: check(ctx) returns (ok, reason, details)."""

    kind = "auto"

    def __init__(self, name: str, check: Callable[["RunContext[Any, Any]"], GateVerdict | tuple[bool, str]], *,
                 pause_on_refusal: bool = False) -> None:
        super().__init__(name)
        self.check = check
        self.pause_on_refusal = pause_on_refusal

    def evaluate(self, ctx: "RunContext[Any, Any]") -> GateVerdict:
        result = self.check(ctx)
        ok, reason = bool(result[0]), str(result[1])
        details = dict(result[2]) if len(result) > 2 else {}
        return ok, reason, details


class ManualGate(Gate):
    """Decided by the operator (or --yes in scripted runs)."""

    kind = "manual"

    def __init__(self, name: str, prompt: str = "") -> None:
        super().__init__(name)
        self.prompt = prompt or f"Approve gate '{name}'?"


@dataclass
class Phase:
    name: str
    steps: list[Step]
    gates: list[Gate] = field(default_factory=list)

    def __post_init__(self) -> None:
        names = [s.name for s in self.steps]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        # Resume and rollback find steps by (phase, name), so names must be unique.
        if duplicates:
            raise ValueError(f"phase {self.name!r} has duplicate step names: {', '.join(duplicates)}")


@dataclass
class Procedure:
    name: str
    phases: list[Phase]
    rollback_on_failure: bool = False
    # Every procedure that may write takes the cluster lock; read-only ones can opt out.
    needs_lock: bool = True
    description: str = ""

    def __post_init__(self) -> None:
        names = [p.name for p in self.phases]
        if len(set(names)) != len(names):
            raise ValueError(f"procedure {self.name!r} has duplicate phase names")

    def phase(self, name: str) -> Phase:
        for phase in self.phases:
            if phase.name == name:
                return phase
        raise KeyError(name)

    def steps(self) -> Iterator[tuple[int, Phase, Step]]:
        """(global index, phase, step) in execution order."""
        index = 0
        for phase in self.phases:
            for step in phase.steps:
                yield index, phase, step
                index += 1

    def find_step(self, phase: str, name: str) -> tuple[int, Step] | None:
        """The step (or a step's sub-step, under its parent's index) named `name` in `phase`."""
        for index, p, step in self.steps():
            if p.name != phase:
                continue
            if step.name == name:
                return index, step
            sub = _find_substep(step, name)
            if sub is not None:
                return index, sub
        return None

    def parent_of(self, phase: str, name: str) -> str:
        """The name of the step that runs `name` as a sub-step; "" for a step of the run itself."""
        for _, p, step in self.steps():
            if p.name == phase and step.name != name and _find_substep(step, name) is not None:
                return step.name
        return ""


def _find_substep(step: Step, name: str) -> Step | None:
    for sub in step.substeps:
        if sub.name == name:
            return sub
        deeper = _find_substep(sub, name)
        if deeper is not None:
            return deeper
    return None


class RunState:
    """Per-run key/value facts persisted in the journal (JSON values).

    Procedures keep here what resume and rollback need after a crash of the
    tool, e.g. the old primary's GTID position or an original setting.
    """

    def __init__(self, journal: "Journal", run_id: str) -> None:
        self._journal = journal
        self._run_id = run_id
        # What this process wrote, as written: its reads of those keys skip the journal (a
        # cutover reads its state several times inside the fenced window). Only keys this
        # process writes are served from here; another process's writes to the others (a live
        # throttle) are read from the journal. One run per cluster at a time (the lease).
        self._written: dict[str, str] = {}

    def get(self, key: str, default: Any = None) -> Any:
        text = self._written.get(key)
        if text is not None:
            return json.loads(text)  # a fresh copy: callers may change what they get
        return self._journal.get_state(self._run_id, key, default)

    def set(self, key: str, value: Any) -> None:
        self._journal.set_state(self._run_id, key, value)
        self._written[key] = json.dumps(value)

    def __getitem__(self, key: str) -> Any:
        missing = object()
        value = self.get(key, missing)
        if value is missing:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._journal.all_state(self._run_id)

    def items(self) -> dict[str, Any]:
        return self._journal.all_state(self._run_id)


class RunContext(Generic[P, R]):
    """Everything a step may use. `RunContext[P, R]`: P is the procedure's params model, R its
    resources object (None when `plan` builds without servers). The engine is procedure-agnostic
    and handles `RunContext[Any, Any]`; a procedure's steps name their own P and R."""

    def __init__(
        self,
        *,
        run_id: str,
        procedure: str,
        cluster: str,
        journal: "Journal",
        bus: "EventBus",
        dry_run: bool = False,
        resources: Any = None,
        params: Any = None,
        playbook: "PlaybookView | None" = None,
        clock: Clock | None = None,
    ) -> None:
        self.run_id = run_id
        self.procedure = procedure
        self.cluster = cluster
        self.journal = journal
        self.bus = bus
        self.dry_run = dry_run
        self.resources: R = resources
        self.params: P = params
        self.playbook = playbook  # what the run was started from (procedures read e.g. its guard section)
        self.clock = clock or Clock()
        self.state = RunState(journal, run_id)
        # Extra DBMIGRATE_* variables for hooks (e.g. DBMIGRATE_OLD_PRIMARY).
        self.hook_env: dict[str, str] = {}
        # Set once the operator asked the run to stop (the runner's cancel): a step that does
        # many independent pieces of work may finish the one in progress and start no other.
        self.cancel: threading.Event | None = None
        # (index, phase, name) of the step the runner runs now: a step that runs sub-steps
        # journals them under it (engine/substeps.py).
        self.step_at: tuple[int, str, str] | None = None

    def hold_for_fenced_window(self) -> None:
        """From just before a fence until the candidate opens, nothing of the tool's own pauses
        the window: the garbage collector is held off, displays get their events when it
        closes (the journal at once), the process has its full CPU priority back. `release_fenced_window` ends it; the runner does too."""
        priority.inside_window()
        collector.hold()
        self.bus.hold()

    def release_fenced_window(self) -> None:
        collector.release()
        self.bus.release()

    def emit(self, event: Event) -> None:
        if not event.run_id:
            event = _with_run_id(event, self.run_id)
        self.bus.emit(event)

    def log(self, message: str, level: str = "info") -> None:
        self.emit(Log(level=level, message=message))

    def metric(self, name: str, value: float, unit: str = "", **labels: str) -> None:
        self.emit(Metric(name=name, value=float(value), unit=unit, labels={k: str(v) for k, v in labels.items()}))

    def record_statement(self, server: str, sql: str, duration_ms: float | None = None) -> None:
        """Journal a statement sent (or, in dry-run, one that would be sent)."""
        self.journal.record_statement(self.run_id, server, sql, duration_ms, self.dry_run)

    def set_hook_env(self, name: str, value: str) -> None:
        """Expose a fact to hooks; the DBMIGRATE_ prefix is added if missing."""
        key = name if name.startswith("DBMIGRATE_") else f"DBMIGRATE_{name.upper()}"
        self.hook_env[key] = str(value)


def _with_run_id(event: Event, run_id: str) -> Event:
    return dataclasses.replace(event, run_id=run_id)
