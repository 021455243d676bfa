"""Runs a procedure: gates, hooks and steps in order, journaled as it goes.

The same loop serves a fresh run and `resume`: every step is asked check()
first, so anything already in place is skipped. On failure the run stops
(and, if the procedure asks for it, undoes what it did, newest first).
`rollback` undoes the completed steps of any earlier run from the journal.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from dbmigrate.engine.events import (
    GateDecided,
    GateWaiting,
    PhaseStarted,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
)
from dbmigrate import priority
from dbmigrate.engine.hooks import HookFailed, HookRunner
from dbmigrate.engine.journal import FINISHED_OK
from dbmigrate.engine.step import AutoGate, Gate, ManualGate, Phase, Procedure, RunContext, Step
from dbmigrate.exceptions import DbmigrateError, GateFailed, NotUndone, Refused, SafetyError

# Asked for each manual gate; returns approved or (approved, reason).
Approver = Callable[[GateWaiting], "bool | tuple[bool, str]"]


class RunPaused(GateFailed):
    """A gate that pauses on refusal said no, or a step found what only the operator can fix
    while everything done so far is consistent: the run stops there, nothing is undone."""


class StepFailed(DbmigrateError):
    """A step's check, run or verify raised; the run stopped at that step."""


class RunCancelled(DbmigrateError):
    """The operator asked the run to stop; it stopped between two steps, never inside one."""


class LeaseLost(DbmigrateError):
    """The run's cluster lease was lost: it stops between two steps and undoes nothing, since
    whoever holds the cluster now may be changing it."""


@dataclass
class RunOutcome:
    run_id: str
    status: str  # done, failed, refused, cancelled, rolled_back, rollback_failed, declined
    summary: str
    error: DbmigrateError | None = None

    @property
    def ok(self) -> bool:
        # A run that failed and was rolled back by itself still failed its purpose.
        return self.status == "done" or (self.status == "rolled_back" and self.error is None)


def explain(exc: BaseException) -> str:
    """One line for the journal: our own errors speak for themselves, others get their type."""
    if isinstance(exc, DbmigrateError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


def not_undone_sentence(rows: list[dict[str, Any]], limit: int = 3) -> str:
    """'not undone (left in place): step 'X' (server: statement; ...)' for the journal's not-undone
    steps; empty when every step was undone."""
    if not rows:
        return ""
    parts = []
    for row in rows:
        left = [f"{s['server']}: {s['sql']}" for s in row["left"]]
        shown = "; ".join(left[:limit]) + (f"; +{len(left) - limit} more" if len(left) > limit else "")
        parts.append(f"step '{row['step']}' ({shown or row['sentence']})")
    return "not undone (left in place): " + ", ".join(parts)


def describe_step(step: Step, ctx: RunContext[Any, Any]) -> str:
    """Journal what a mutating step would send (a dry run), and say it in one sentence."""
    if step.describe is None:
        return "would run; this step does not describe its statements"
    lines = list(step.describe(ctx))
    texts = []
    for line in lines:
        server, text = line if isinstance(line, tuple) else ("", line)
        ctx.record_statement(server, text)
        texts.append(f"{server}: {text}" if server else text)
    if not texts:
        return "would send nothing"
    shown = "; ".join(texts[:2]) + (f" (+{len(texts) - 2} more)" if len(texts) > 2 else "")
    return f"would send {len(texts)} statement{'s' if len(texts) > 1 else ''}: {shown}"


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


class Runner:
    """Executes procedures. The journal subscribes itself to the run's bus for the run's duration."""

    def __init__(
        self,
        *,
        approver: Approver | None = None,
        assume_yes: bool = False,
        hooks: HookRunner | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.approver = approver
        self.assume_yes = assume_yes
        self.hooks = hooks or HookRunner()
        # Set from another thread (e.g. an interactive UI) to stop before the next gate or step.
        self.cancel = cancel
        self.current: str | None = None  # the step running or being undone, for an interruption's summary
        # Asked between steps: a reason to stop (e.g. the cluster lease was lost), or None.
        self.stop_check: Callable[[], str | None] | None = None

    # ------------------------------------------------------------------ forward

    def run(self, procedure: Procedure, ctx: RunContext[Any, Any], *, resume: bool = False) -> RunOutcome:
        """Run (or resume) the procedure for the run in ctx; the run row must exist in the journal."""
        unsubscribe = ctx.bus.subscribe(ctx.journal.record, critical=True)
        if ctx.cancel is None:
            ctx.cancel = self.cancel
        priority.begin_run()  # the tool yields the cores until its first fenced window
        try:
            return self._forward(procedure, ctx, resume)
        finally:
            ctx.release_fenced_window()  # a window that ended in a failure released nothing
            priority.end_run()
            unsubscribe()

    def _forward(self, procedure: Procedure, ctx: RunContext[Any, Any], resume: bool) -> RunOutcome:
        journal = ctx.journal
        prior = journal.last_step_status(ctx.run_id) if resume else {}
        passed_gates = journal.passed_gates(ctx.run_id) if resume else set()
        hooks_done = journal.succeeded_hooks(ctx.run_id) if resume else set()
        if resume:
            journal.mark_running(ctx.run_id)
        counts: Counter[str] = Counter()
        ctx.emit(RunStarted(procedure=procedure.name, cluster=ctx.cluster, dry_run=ctx.dry_run, resumed=resume))
        try:
            if not resume:
                self._refuse_unanswerable_gates(procedure, ctx)
            index = 0
            for phase in procedure.phases:
                self._stop_if_cancelled(ctx, f"the gates of phase '{phase.name}'")
                self._pass_gates(phase, ctx, passed_gates)
                self._phase_hooks("before_phase", ctx, phase.name, hooks_done)
                ctx.emit(PhaseStarted(phase=phase.name))
                for step in phase.steps:
                    self._stop_if_cancelled(ctx, f"step '{step.name}'")
                    counts[self._execute(index, phase, step, ctx, prior.get((phase.name, step.name)))] += 1
                    index += 1
                self._phase_hooks("after_phase", ctx, phase.name, hooks_done)
        except KeyboardInterrupt:
            ctx.emit(RunFinished(status="interrupted", summary=self._interrupted(ctx)))
            raise
        except Exception as exc:
            try:
                return self._fail(procedure, ctx, exc)
            except KeyboardInterrupt:
                ctx.emit(RunFinished(status="interrupted", summary=self._interrupted(ctx, "while rolling back")))
                raise
        self._final_hooks("on_success", ctx)
        parts = [f"{counts[s]} {s}" for s in ("done", "skipped", "dry-run") if counts[s]]
        summary = f"{procedure.name} finished" + (": " + ", ".join(parts) if parts else "")
        ctx.emit(RunFinished(status="done", summary=summary))
        return RunOutcome(ctx.run_id, "done", summary)

    def can_ask(self) -> bool:
        """Is there an operator to answer a manual gate (a terminal, the TUI)?"""
        if self.assume_yes:
            return True
        if self.approver is None:
            return False
        return bool(getattr(self.approver, "can_ask", lambda: True)())

    def _refuse_unanswerable_gates(self, procedure: Procedure, ctx: RunContext[Any, Any]) -> None:
        """A manual gate with nobody to ask would refuse when reached: refuse before the first step,
        so that nothing is changed only to be undone."""
        if ctx.dry_run or self.can_ask():
            return
        manual = [f"'{g.name}' before phase '{p.name}'" for p in procedure.phases for g in p.gates
                  if isinstance(g, ManualGate)]
        if manual:
            raise GateFailed(f"manual gate {manual[0]} needs an operator's approval: no terminal to ask the "
                             f"operator; pass --yes to approve in scripted runs")

    def _fail(self, procedure: Procedure, ctx: RunContext[Any, Any], exc: Exception) -> RunOutcome:
        # The operator sees the failure and the undo as they happen, not when the run ends.
        ctx.release_fenced_window()
        error = exc if isinstance(exc, DbmigrateError) else DbmigrateError(f"internal error: {explain(exc)}")
        refused = isinstance(exc, GateFailed) or isinstance(exc.__cause__, Refused)
        status = "refused" if refused else "cancelled" if isinstance(exc, RunCancelled) else "failed"
        summary = error.message
        if isinstance(exc, RunPaused):
            # Everything done so far is consistent and stays: resume or roll back by decision.
            self._final_hooks("on_failure", ctx)
            ctx.emit(RunFinished(status="paused", summary=summary))
            return RunOutcome(ctx.run_id, "paused", summary, error)
        if not ctx.dry_run and status in ("refused", "cancelled") and not self._changed_anything(procedure, ctx) \
                and self._observing(procedure, ctx):
            # Only observation windows were opened: put them back; then nothing has changed.
            put_back, how = self._undo_completed(procedure, ctx)
            if not put_back:
                error.hint = f"fix the failing undo, then: dbmigrate rollback {ctx.run_id}"
                summary = f"{summary}; rollback: {how}"
                self._final_hooks("on_failure", ctx)
                ctx.emit(RunFinished(status="rollback_failed", summary=summary))
                return RunOutcome(ctx.run_id, "rollback_failed", summary, error)
        if ctx.dry_run or (status in ("refused", "cancelled") and not self._changed_anything(procedure, ctx)):
            # Nothing to undo (a dry run changes nothing): saying "rolled back" would
            # suggest something had changed.
            if ctx.dry_run:
                summary, error.hint = f"dry run stopped: {error.message}", "nothing was changed (dry run)"
            elif refused:
                summary = f"refused before any change: {error.message}"
                error.hint = error.hint or "fix the cause and start a new run"
            else:
                summary = f"stopped before any change: {error.message}"
                error.hint = f"nothing was changed; continue later with: dbmigrate resume {ctx.run_id}"
            self._final_hooks("on_failure", ctx)
            ctx.emit(RunFinished(status=status, summary=summary))
            return RunOutcome(ctx.run_id, status, summary, error)
        if procedure.rollback_on_failure and not isinstance(exc, LeaseLost):
            ctx.log("the procedure rolls back on failure: undoing completed steps", "warning")
            rolled_back, rollback_summary = self._undo_completed(procedure, ctx)
            status = "rolled_back" if rolled_back else "rollback_failed"
            summary = f"{summary}; rollback: {rollback_summary}"
            left = not_undone_sentence(ctx.journal.not_undone(ctx.run_id))
            if not rolled_back:
                error.hint = f"fix the failing undo, then: dbmigrate rollback {ctx.run_id}"
            elif left:
                error.hint = (f"the other completed steps were undone, but NOT {left}; "
                              f"fix the cause and start a new run")
            else:
                error.hint = "the completed steps were undone; fix the cause and start a new run"
        self._final_hooks("on_failure", ctx)
        ctx.emit(RunFinished(status=status, summary=summary))
        return RunOutcome(ctx.run_id, status, summary, error)

    def _interrupted(self, ctx: RunContext[Any, Any], during: str = "") -> str:
        """What an interruption leaves, in the journal's summary: which step may be half done."""
        where = f" {during}" if during else ""
        if self.current:
            where += f" in step '{self.current}', which may be half done"
        return (f"interrupted by the operator{where}; undo with: dbmigrate rollback {ctx.run_id}, "
                f"or continue with: dbmigrate resume {ctx.run_id}")

    def _stop_if_cancelled(self, ctx: RunContext[Any, Any], before: str) -> None:
        reason = self.stop_check() if self.stop_check is not None else None
        if reason:
            raise LeaseLost(f"{reason}: stopped before {before}, nothing undone",
                            hint=f"find out who holds the cluster now; then: dbmigrate resume {ctx.run_id} "
                                 f"or dbmigrate rollback {ctx.run_id}")
        if self.cancel is not None and self.cancel.is_set():
            raise RunCancelled(f"cancelled by the operator before {before}",
                               hint=f"continue later with: dbmigrate resume {ctx.run_id}")

    def _execute(self, index: int, phase: Phase, step: Step, ctx: RunContext[Any, Any], prior: str | None) -> str:
        """Run one step; return its final status or raise StepFailed."""
        # The run id given here spares each event a copy made to add it (ctx.emit).
        started = time.perf_counter()

        def finish(status: str, sentence: str = "", error: str | None = None) -> str:
            ctx.emit(StepFinished(index=index, phase=phase.name, name=step.name, run_id=ctx.run_id, status=status,
                                  sentence=sentence, error=error, duration_ms=_elapsed_ms(started)))
            return status

        if prior in FINISHED_OK and step.check is None:
            # Nothing to ask the servers; the journal is the only witness.
            return finish("skipped", "already done earlier in this run (journal)")
        try:
            already = bool(step.check(ctx)) if step.check is not None else False
        except Exception as exc:
            finish("failed", error=f"check failed: {explain(exc)}")
            raise self._step_failed(step, phase, ctx, f"check failed: {explain(exc)}") from exc
        if already:
            return finish("skipped", "already done")
        if prior in FINISHED_OK:
            ctx.log(f"step '{step.name}' was done earlier in this run but its check says it is not: running it again",
                    "warning")

        if ctx.dry_run and step.mutating:
            return finish("dry-run", self._describe(step, ctx))

        ctx.emit(StepStarted(index=index, phase=phase.name, name=step.name, run_id=ctx.run_id,
                             mutating=step.mutating))
        self.current = step.name
        ctx.step_at = (index, phase.name, step.name)
        try:
            sentence = step.run(ctx)
        except RunPaused as exc:
            # The step found the cluster in a consistent state that needs the operator (e.g. a
            # replica broken after the cutover, a blind latency guard): stop there, undo nothing;
            # resume runs it again.
            self.current = None
            finish("failed", error=explain(exc))
            raise
        except Refused as exc:
            self.current = None
            finish("refused", error=explain(exc))  # changed nothing: not a step to undo
            raise self._step_failed(step, phase, ctx, explain(exc)) from exc
        except Exception as exc:
            self.current = None
            finish("failed", error=explain(exc))
            raise self._step_failed(step, phase, ctx, explain(exc)) from exc
        except BaseException:
            finish("interrupted", error="interrupted before the step finished")
            raise
        try:
            if step.verify is not None:
                step.verify(ctx)
        except Exception as exc:
            finish("failed", sentence or "", error=f"postcondition not met: {explain(exc)}")
            raise self._step_failed(step, phase, ctx, f"postcondition not met: {explain(exc)}") from exc
        except BaseException:
            finish("interrupted", sentence or "", error="interrupted while verifying")
            raise
        self.current = None
        return finish("done", sentence or f"{step.name}: done")

    @staticmethod
    def _describe(step: Step, ctx: RunContext[Any, Any]) -> str:
        return describe_step(step, ctx)

    @staticmethod
    def _step_failed(step: Step, phase: Phase, ctx: RunContext[Any, Any], reason: str) -> StepFailed:
        return StepFailed(
            f"step '{step.name}' in phase '{phase.name}' failed: {reason}",
            hint=f"fix the cause, then: dbmigrate resume {ctx.run_id}  (or undo: dbmigrate rollback {ctx.run_id})",
        )

    # ------------------------------------------------------------------ gates and hooks

    def _pass_gates(self, phase: Phase, ctx: RunContext[Any, Any], already_passed: set[tuple[str, str]]) -> None:
        for gate in phase.gates:
            if (phase.name, gate.name) in already_passed:
                continue  # decided earlier in this run; the journal holds that decision
            ok, reason, details, by = self._decide(gate, phase.name, ctx)
            ctx.emit(GateDecided(phase=phase.name, gate=gate.name, kind=gate.kind, ok=ok, reason=reason,
                                 by=by, details=details))
            if not ok and gate.pause_on_refusal:
                ok = self._override(gate, phase.name, ctx, reason)
                if not ok:
                    raise RunPaused(
                        f"paused at gate '{gate.name}' before phase '{phase.name}': {reason}",
                        hint=f"nothing was undone; when the condition is met (or to decide anyway at a terminal): "
                             f"dbmigrate resume {ctx.run_id}; to undo instead: dbmigrate rollback {ctx.run_id}")
            if not ok:
                raise GateFailed(
                    f"gate '{gate.name}' before phase '{phase.name}' refused: {reason}",
                    hint=f"nothing of phase '{phase.name}' ran; when the condition is met: dbmigrate resume {ctx.run_id}",
                )

    def _override(self, gate: Gate, phase: str, ctx: RunContext[Any, Any], reason: str) -> bool:
        """A pausing gate refused: an operator at a terminal may continue anyway; a
        scripted run (--yes, no terminal) pauses, it never overrides an automatic check."""
        if self.approver is None or self.assume_yes:
            return False
        waiting = GateWaiting(run_id=ctx.run_id, phase=phase, gate=gate.name, kind="manual", cluster=ctx.cluster,
                              prompt=f"{reason}. Continue anyway? (no: the run pauses, nothing is undone)")
        ctx.emit(waiting)
        try:
            answer = self.approver(waiting)
        except (EOFError, KeyboardInterrupt):
            return False
        ok = bool(answer[0] if isinstance(answer, tuple) else answer)
        if ok:
            ctx.emit(GateDecided(phase=phase, gate=gate.name, kind="manual", ok=True, by="operator",
                                 reason=f"continued by the operator despite: {reason}", details={}))
        return ok

    def _decide(self, gate: Gate, phase: str, ctx: RunContext[Any, Any]) -> tuple[bool, str, dict[str, Any], str]:
        if isinstance(gate, AutoGate):
            ctx.emit(GateWaiting(phase=phase, gate=gate.name, kind="auto"))
            try:
                ok, reason, details = gate.evaluate(ctx)
            except Exception as exc:
                return False, f"gate check raised {explain(exc)}", {}, "auto"
            return ok, reason, details, "auto"
        prompt = gate.prompt if isinstance(gate, ManualGate) else f"Approve gate '{gate.name}'?"
        if self.assume_yes:
            return True, "approved by --yes", {}, "--yes"
        if self.approver is None:
            return False, "needs an operator's approval: run in a terminal or pass --yes", {}, "auto"
        waiting = GateWaiting(run_id=ctx.run_id, phase=phase, gate=gate.name, kind="manual", prompt=prompt,
                              cluster=ctx.cluster)
        ctx.emit(waiting)
        try:
            answer = self.approver(waiting)
        except (EOFError, KeyboardInterrupt):
            return False, "no answer from the operator", {}, "operator"
        ok, reason = answer if isinstance(answer, tuple) else (bool(answer), "")
        return ok, reason or ("approved by operator" if ok else "declined by operator"), {}, "operator"

    def _phase_hooks(self, kind: str, ctx: RunContext[Any, Any], phase: str, hooks_done: set[tuple[str, str | None, str]]) -> None:
        skip = {command for (k, p, command) in hooks_done if k == kind and p == phase}
        self.hooks.run(kind, ctx, phase, skip=skip)

    def _final_hooks(self, kind: str, ctx: RunContext[Any, Any]) -> None:
        # The outcome is already decided; a broken notifier must not change it.
        try:
            self.hooks.run(kind, ctx, None)
        except HookFailed as exc:
            ctx.log(exc.message, "warning")

    # ------------------------------------------------------------------ backward

    def rollback(self, procedure: Procedure, ctx: RunContext[Any, Any]) -> RunOutcome:
        """Undo the completed steps of the run in ctx, newest first, after confirmation."""
        unsubscribe = ctx.bus.subscribe(ctx.journal.record, critical=True)
        try:
            return self._backward(procedure, ctx)
        finally:
            ctx.release_fenced_window()
            unsubscribe()

    def _changed_anything(self, procedure: Procedure, ctx: RunContext[Any, Any]) -> bool:
        """Did a mutating step of this run complete (or start and ask to be undone)?"""
        for row in self._to_undo(procedure, ctx):
            found = procedure.find_step(row["phase"], row["name"])
            if found is None or (found[1].mutating and not found[1].observes_only):
                return True
        return False

    def _observing(self, procedure: Procedure, ctx: RunContext[Any, Any]) -> bool:
        """Does an observation window of this run stay open (to be put back)?"""
        return any(found is not None and found[1].observes_only
                   for found in (procedure.find_step(r["phase"], r["name"]) for r in self._to_undo(procedure, ctx)))

    def _to_undo(self, procedure: Procedure, ctx: RunContext[Any, Any]) -> list[dict[str, Any]]:
        """Completed steps, plus unfinished ones that ask to be undone anyway, oldest first."""
        rows = {(r["phase"], r["name"]): r for r in ctx.journal.completed_steps(ctx.run_id)}
        for row in ctx.journal.unfinished_steps(ctx.run_id):
            found = procedure.find_step(row["phase"], row["name"])
            if found is not None and found[1].undo_if_started:
                rows[(row["phase"], row["name"])] = row  # once, even if an earlier attempt finished
        # A step's sub-steps share its index and come after it: undone newest first, they are
        # undone before the step that ran them (whose own undo then finds their work undone).
        return sorted(rows.values(), key=lambda r: (r["index"], bool(procedure.parent_of(r["phase"], r["name"]))))

    def _backward(self, procedure: Procedure, ctx: RunContext[Any, Any]) -> RunOutcome:
        pending = list(reversed(self._to_undo(procedure, ctx)))
        missing = [r for r in pending if procedure.find_step(r["phase"], r["name"]) is None]
        if missing:
            gone = ", ".join(f"{r['phase']}/{r['name']}" for r in missing)
            raise SafetyError(
                f"cannot roll back run {ctx.run_id}: step(s) {gone} are journaled but no longer in "
                f"procedure '{procedure.name}'",
                hint="the playbook or the tool changed since the run; restore the version used for the run",
            )
        names = [r["name"] for r in pending]
        run = ctx.journal.get_run(ctx.run_id)
        status, started = (run.status, run.started_at) if run else ("?", "?")
        gate = ManualGate("rollback", f"Undo {len(names)} step(s) of {procedure.name} run {ctx.run_id} on cluster "
                                      f"{ctx.cluster} ({status}, started {started}),"
                                      f" newest first: " + (", ".join(names) or "nothing"))
        if pending:
            ok, reason, _, by = self._decide(gate, "rollback", ctx)
            ctx.emit(GateDecided(phase="rollback", gate="rollback", kind="manual", ok=ok, reason=reason, by=by))
            if not ok:
                return RunOutcome(ctx.run_id, "declined", f"rollback not started: {reason}",
                                  GateFailed(f"rollback of run {ctx.run_id} not started: {reason}"))
        ctx.journal.mark_running(ctx.run_id)
        ctx.emit(RunStarted(procedure=procedure.name, cluster=ctx.cluster, dry_run=ctx.dry_run, rollback=True))
        try:
            ok, summary = self._undo_completed(procedure, ctx)
        except KeyboardInterrupt:
            undoing = f" while undoing step '{self.current}', which may be half undone" if self.current else ""
            ctx.emit(RunFinished(status="interrupted",
                                 summary=f"rollback interrupted{undoing}; run again: dbmigrate rollback {ctx.run_id}"))
            raise
        status = "rolled_back" if ok else "rollback_failed"
        ctx.emit(RunFinished(status=status, summary=summary))
        error = None if ok else DbmigrateError(summary, hint=f"fix the cause, then: dbmigrate rollback {ctx.run_id}")
        return RunOutcome(ctx.run_id, status, summary, error)

    def _undo_completed(self, procedure: Procedure, ctx: RunContext[Any, Any]) -> tuple[bool, str]:
        """Undo completed, not yet undone steps, newest first; stop at the first failure."""
        undone = not_undone = 0
        for row in reversed(self._to_undo(procedure, ctx)):
            found = procedure.find_step(row["phase"], row["name"])
            if found is None:
                return False, f"step '{row['name']}' is no longer part of the procedure; {undone} step(s) undone"
            index, step = found
            where = dict(index=index, phase=row["phase"], name=step.name, action="undo",
                         parent=procedure.parent_of(row["phase"], step.name))
            started = time.perf_counter()
            if step.undo is None:
                ctx.emit(StepFinished(**where, status="skipped", sentence="nothing to undo"))
                continue
            ctx.emit(StepStarted(**where, mutating=step.mutating))
            self.current = step.name
            try:
                sentence = step.undo(ctx)
            except NotUndone as exc:
                # Its change stays: said as such, never counted as undone; the rollback goes on.
                self.current = None
                ctx.emit(StepFinished(**where, status="not_undone", sentence=f"not undone: {exc.message}",
                                      duration_ms=_elapsed_ms(started)))
                not_undone += 1
                continue
            except Exception as exc:
                ctx.emit(StepFinished(**where, status="failed", error=explain(exc), duration_ms=_elapsed_ms(started)))
                return False, f"undo of '{step.name}' failed: {explain(exc)}; {undone} step(s) undone before it"
            except BaseException:
                ctx.emit(StepFinished(**where, status="interrupted", error="interrupted during undo",
                                      duration_ms=_elapsed_ms(started)))
                raise
            self.current = None
            ctx.emit(StepFinished(**where, status="undone", sentence=sentence or f"undid {step.name}",
                                  duration_ms=_elapsed_ms(started)))
            undone += 1
        said = f"undid {undone} step(s)" if undone else "nothing to undo"
        if not_undone:
            said += f"; {not_undone_sentence(ctx.journal.not_undone(ctx.run_id))}"
        return True, said
