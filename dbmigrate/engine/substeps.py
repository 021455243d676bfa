"""Steps a step runs itself: a fleet step's per-server steps, each server's in its own thread.

The runner runs a run's steps one after the other; a fleet step runs every old server's work
in lanes side by side, and each server's work is itself a list of steps (its cutover: fence,
catch up, check, ...). `SubSteps` runs such a list the way the runner runs a run's steps, in
the calling thread: each step's check first (already in place: skipped), then its run and its
verify, each journaled as a step of its own (its StepStarted and StepFinished carry the
parent's index and name), so that the fault matrix pauses between them, `resume` finds each
one's check, and `rollback` undoes the completed ones (the parent declares them as its
`substeps`, so `Procedure.find_step` finds them by name).

Unlike the runner it does not ask the journal whether a step was done earlier: a step without a
check runs again (sub-steps are idempotent), since a server put back on its own (a per-server
rollback) begins again from its first step. It never stops between two sub-steps for a
cancellation: the parent decides where stopping is safe (between servers). A step's exception
is raised as it was, after its StepFinished.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from dbmigrate.engine.events import StepFinished, StepStarted
from dbmigrate.engine.runner import describe_step, explain
from dbmigrate.engine.step import RunContext, Step
from dbmigrate.exceptions import Refused


class SubSteps:
    """One list of sub-steps run in order (see the module doc); `done` and `started` say how far
    it got, for the parent's own undo of a failure in place."""

    def __init__(self, ctx: RunContext[Any, Any], steps: Sequence[Step]) -> None:
        self.ctx, self.steps = ctx, list(steps)
        # Journaled under the step the runner runs now (its index, phase and name).
        self.index, self.phase, self.parent = ctx.step_at if ctx.step_at is not None else (0, "", "")
        self.sentences: dict[str, str] = {}  # step name -> what it said (done or skipped)
        self.started: list[Step] = []  # run (not only checked), in order
        self.failed: Step | None = None

    def run(self) -> list[str]:
        """Run every step in order; the sentences of those that ran."""
        said = []
        for step in self.steps:
            status, sentence = self.execute(step)
            if status == "done":
                said.append(sentence)
        return said

    def execute(self, step: Step) -> tuple[str, str]:
        ctx = self.ctx
        started = time.perf_counter()

        def finish(status: str, sentence: str = "", error: str | None = None) -> tuple[str, str]:
            ctx.emit(StepFinished(index=self.index, phase=self.phase, name=step.name, run_id=ctx.run_id,
                                  status=status, sentence=sentence, error=error, parent=self.parent,
                                  duration_ms=round((time.perf_counter() - started) * 1000, 3)))
            self.sentences[step.name] = sentence
            return status, sentence

        try:
            already = bool(step.check(ctx)) if step.check is not None else False
        except Exception as exc:
            self.failed = step
            finish("failed", error=f"check failed: {explain(exc)}")
            raise
        if already:
            return finish("skipped", "already done")
        if ctx.dry_run and step.mutating:
            return finish("dry-run", describe_step(step, ctx))
        ctx.emit(StepStarted(index=self.index, phase=self.phase, name=step.name, run_id=ctx.run_id,
                             mutating=step.mutating, parent=self.parent))
        self.started.append(step)
        try:
            sentence = step.run(ctx)
            if step.verify is not None:
                step.verify(ctx)
        except Refused as exc:
            self.failed = step
            finish("refused", error=explain(exc))  # changed nothing: not a step to undo
            raise
        except Exception as exc:
            self.failed = step
            finish("failed", error=explain(exc))
            raise
        except BaseException:
            self.failed = step
            finish("interrupted", error="interrupted before the step finished")
            raise
        return finish("done", sentence or f"{step.name}: done")
