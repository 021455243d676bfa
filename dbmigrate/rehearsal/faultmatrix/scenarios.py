"""The fault matrix: which fault, where, and what the operator does afterwards.

A scenario id reads `procedure/fault/where/recovery`, e.g. `promote/kill9/in-fence/resume`:
the promote run is paused at the point `where` names (see dbmigrate.faultpoint), the
fault is injected, and when the run did not end on its own (done or rolled back), the
operator runs `recovery` once (`dbmigrate resume RUN` or `dbmigrate rollback RUN`).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

# Step boundaries of the promote cutover: before the first step (journaled as started, nothing
# done), then after each step (journaled as finished, the next not started). A step whose check
# finds it done is journaled "skipped" and never starts, so boundaries are taken after steps.
PROMOTE_BOUNDARIES = {
    "before-fence": "before:fence",
    "after-fence": "after:fence",
    "after-catchup": "after:wait for",
    "after-open": "after:open",
    "after-flip": "after:switch router",
    "after-end-sessions": "after:end application sessions",
    "after-reset": "after:reset replication",
    "after-repoint": "after:repoint",
    "after-reverse": "after:reverse",
    "after-verify": "after:verify writes flow",
}
# Inside a step: right after the statement (or router command) that changes something, before
# the step is journaled as finished. Not inside the catch-up: under this load the candidate has
# applied the final position when the step's check asks, so that step is skipped and a kill
# "during catch-up" is the after-fence boundary (the frozen-candidate scenario stalls it for real).
PROMOTE_INSIDE = {
    "in-fence": "in:fence:read_only=on",  # old primary read-only, final position not journaled
    "in-open": "in:open:read_only=off",  # candidate writable, router on it, the route not yet saved
    "in-flip": "in:switch router:set server",  # router flipped to the still read-only candidate, not journaled
    "in-repoint": "in:repoint:change master",  # a replica pointed at the new primary, not started
    "in-reverse": "in:reverse:change master",  # old primary pointed at the new one, not started
}
SIGNALS = ("kill9", "sigterm", "sigint")
RECOVERIES = ("resume", "rollback")
BAD_SETTINGS = ("down-replica", "missing-router-socket", "unknown-writer-backend", "wrong-repl-password",
                "huge-timeout")

# The subset run by the test suite (a few minutes on 2 cores).
FAST = {
    "promote/kill9/in-fence/resume", "promote/kill9/in-fence/rollback", "promote/sigterm/in-open/rollback",
    "promote/sigint/after-open/resume", "promote/kill9/in-flip/resume", "promote/kill9/in-repoint/rollback",
    "promote/freeze-candidate/after-fence/rollback", "promote/kill-old-primary/after-fence/resume",
    "promote/kill-haproxy/after-open/rollback", "promote/lock-at-fence/before-fence/none",
    "promote/sigterm/in-fence/resume", "promote/kill9/in-open/resume", "promote/sigint/in-repoint/rollback",
    "promote/kill9/in-reverse/resume", "promote/sigterm/after-verify/rollback",
    "schema-swap/kill9/in-fence/resume", "schema-swap/kill9/after-ddl/rollback",
    *(f"promote/bad-setting/{b}/none" for b in BAD_SETTINGS),
}


@dataclass(frozen=True)
class Scenario:
    procedure: str
    fault: str  # kill9, sigterm, sigint, freeze-candidate, kill-old-primary, kill-haproxy, lock-at-fence, bad-setting
    where: str  # a key of the pause points, or the bad setting's name
    recovery: str  # resume, rollback, none
    pause: str | None  # DBMIGRATE_FAULT_PAUSE for the run

    @property
    def id(self) -> str:
        return f"{self.procedure}/{self.fault}/{self.where}/{self.recovery}"

    @property
    def fast(self) -> bool:
        return self.id in FAST

    @property
    def refusal(self) -> bool:
        """Bad settings: the run must be refused before the fence, nothing changed."""
        return self.fault == "bad-setting"


def promote_matrix() -> list[Scenario]:
    out = []
    points = {**PROMOTE_BOUNDARIES, **PROMOTE_INSIDE}
    for where, pause in points.items():
        for sig in SIGNALS:
            for rec in RECOVERIES:
                out.append(Scenario("promote", sig, where, rec, pause))
    out += [
        Scenario("promote", "freeze-candidate", "after-fence", "rollback", "after:fence"),
        Scenario("promote", "freeze-candidate", "after-fence", "resume", "after:fence"),
        Scenario("promote", "kill-old-primary", "after-fence", "resume", "after:fence"),
        Scenario("promote", "kill-old-primary", "after-fence", "rollback", "after:fence"),
        Scenario("promote", "kill-haproxy", "after-open", "rollback", "after:open"),
        Scenario("promote", "kill-haproxy", "after-open", "resume", "after:open"),
        Scenario("promote", "lock-at-fence", "before-fence", "none", "before:fence"),
    ]
    out += [Scenario("promote", "bad-setting", b, "none", None) for b in BAD_SETTINGS]
    return out


# Schema swap: its own boundary (a side altered, binlog off) and the fences of its two switchovers.
SWAP_POINTS = {
    "after-ddl": "after:apply ddl on",  # the first replica altered and journaled, the next side not begun
    "in-fence": "in:fence:read_only=on",  # the primary's side: old primary fenced, position not journaled
    "in-switch-back": "in:switch back:read_only=on",  # switching back to the altered old primary
}


def swap_matrix() -> list[Scenario]:
    return [Scenario("schema-swap", sig, where, rec, pause)
            for where, pause in SWAP_POINTS.items() for sig in SIGNALS for rec in RECOVERIES]


def all_scenarios() -> list[Scenario]:
    return promote_matrix() + swap_matrix()


def select(scenarios: list[Scenario], only: str | None = None, fast: bool = False) -> list[Scenario]:
    """--only takes comma-separated ids or glob patterns (`promote/kill9/*`, `*/in-fence/*`)."""
    picked = [s for s in scenarios if s.fast] if fast else list(scenarios)
    if only:
        patterns = [p.strip() for p in only.split(",") if p.strip()]
        picked = [s for s in picked if any(fnmatch.fnmatchcase(s.id, p) for p in patterns)]
    return picked
