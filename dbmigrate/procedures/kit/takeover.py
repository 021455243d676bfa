"""Completing a cutover without its old primary: the old primary died after the fence, so
neither the rest of the cutover (which seals and reverses onto it) nor its undo (which
unfences it) can run. The operator asks for this explicitly (`dbmigrate resume RUN
--without-old-primary`); these steps then promote the candidate, provided it holds
everything known to have been written: the old primary's final position, journaled right
after the fence, and whatever an answering replica applied or received.

The facts are a gate (refused: nothing of the takeover runs), then an operator's approval,
then: open the candidate, switch the router, forget the old source, move the replicas,
verify a write reaches them. Each step is checked first, so the command can be repeated.
"""

from __future__ import annotations

from typing import Any

from dbmigrate.engine.step import AutoGate, FunctionStep, ManualGate, Phase, Procedure, RunContext, Step
from dbmigrate.exceptions import SafetyError
from dbmigrate.procedures.kit.cutover import CutoverState, Cutover, state, switch_router

PHASE = "takeover"


def facts_gate(cut: Cutover) -> AutoGate:
    def check(ctx: RunContext[Any, Any]) -> tuple[bool, str]:
        st = state(ctx)
        sw = cut.sw(ctx)
        if sw.old_answers():
            return False, (f"{cut.old} answers: it is not gone; finish with dbmigrate resume {ctx.run_id} "
                           f"or undo with dbmigrate rollback {ctx.run_id}")
        if st.fence_pos is None:
            return False, (f"{cut.old} does not answer and this run journaled no final position of it (it stopped "
                           f"before the fence completed): what {cut.old} acknowledged last is unknown, so "
                           f"{cut.new} cannot be shown to hold it; recover {cut.old}'s data first")
        facts, problems = sw.takeover_facts(st.fence_pos)
        facts.insert(0, f"{cut.old} does not answer within {sw.s.probe_timeout_s:g}s")
        if st.bypass_users:
            facts.append(f"accounts that bypass read_only ({', '.join(st.bypass_users)}) could have committed on "
                         f"{cut.old} after the fence: such writes, if any, are not known")
        if problems:
            return False, "; ".join(problems) + " — " + "; ".join(facts)
        return True, "; ".join(facts) + f"; {cut.new} holds everything known"
    return AutoGate(f"{cut.new} holds everything {cut.old} acknowledged", check)


def open_without_old(cut: Cutover, ctx: RunContext[Any, Any]) -> str:
    sw = cut.sw(ctx)
    if sw.old_answers():  # asked again: the gate may have been decided by an earlier attempt
        raise SafetyError(f"{cut.old} answers again: refusing to open {cut.new} beside it (two primaries)",
                          hint=f"finish normally: dbmigrate resume {ctx.run_id}, or dbmigrate rollback {ctx.run_id}")
    with CutoverState.edit(ctx.state) as s:
        s.candidate_opened = True  # journaled before the statement, as in the cutover
    # The old primary does not answer: its fence's expiry cannot be dropped (see the known limits).
    return sw.open_candidate(sealed=True)


def takeover_procedure(name: str, cut: Cutover) -> Procedure:
    steps: list[Step] = [
        FunctionStep(f"open {cut.new} for writes", lambda c: open_without_old(cut, c),
                     check=lambda c: state(c).candidate_opened and cut.sw(c).is_open()),
        FunctionStep("switch router", lambda c: switch_router(cut, c),
                     check=lambda c: cut.sw(c).router_points_to(cut.new)),
        FunctionStep(f"reset replication on {cut.new}", lambda c: cut.sw(c).reset_new_replication(),
                     check=lambda c: not cut.sw(c).has_replication_config(cut.new)),
        FunctionStep("repoint replicas", lambda c: cut.sw(c).repoint_without_old(),
                     check=lambda c: cut.sw(c).replicas_repointed()),
        FunctionStep("verify writes flow",
                     lambda c: cut.sw(c).verify_writes_flow(c.run_id, old_gone=True)
                     + f"; keep {cut.old} down: rebuild it as a replica of {cut.new} before it serves again",
                     mutating=True),
    ]
    gates = [facts_gate(cut),
             ManualGate(f"promote {cut.new} without {cut.old}",
                        f"Open {cut.new} for writes and send writes to it, without {cut.old} (gone)? {cut.old} must "
                        f"stay down until rebuilt as a replica of {cut.new}")]
    # No rollback: the server it would return to is gone.
    return Procedure(name, [Phase(PHASE, steps, gates=gates)], rollback_on_failure=False)
