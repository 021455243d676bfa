"""The fault matrix: which fault, where, and what the operator does afterwards.

A scenario id reads `procedure/fault/where/recovery`, e.g. `promote/kill9/in-fence/resume`:
the promote run is paused at the point `where` names (see dbmigrate.faultpoint), the
fault is injected, and when the run did not end on its own (done or rolled back), the
operator runs `recovery` once (`dbmigrate resume RUN` or `dbmigrate rollback RUN`).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from dbmigrate.procedures.kit.switchover import SwitchoverParams

# The playbook every promote scenario runs (seconds). No-writer time is judged against these.
SETTINGS = {"catchup_timeout_s": 3, "probe_timeout_s": 1, "fence_timeout_s": 2, "fence_drain_timeout_s": 0.5,
            "converge_timeout_s": 10,
            # Under load about 3 fences in 100 meet two application transactions waiting on each
            # other: the fence gives up after fence_block_s and is tried again, writes flowing between.
            "fence_attempts": 3, "fence_retry_pause_s": 0.3,
            "replica_timeout_s": 20, "verify_timeout_s": 10, "lag_wait_s": 5, "max_lag_ms": 60000}
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
    # The open in flight at a kill -9, then rollback: two writable servers for good before
    # fencing generations and write-ahead intents (about 55 s with its 30 s after exit).
    "promote/kill9-in-flight/open/rollback",
    *(f"promote/bad-setting/{b}/none" for b in BAD_SETTINGS),
}
# The relay's rows in the suite (tests/integration/test_relay_faults.py, skipped without Go).
RELAY_FAST = {"promote/kill-relay/in-fence@now/resume", "promote/kill-relay/in-move@now/rollback",
              "promote/kill9/in-move@relay/resume"}  # the tool killed with the move journaled, not sent


@dataclass(frozen=True)
class Scenario:
    procedure: str
    fault: str  # kill9, sigterm, sigint, freeze-candidate, kill-old-primary, kill-haproxy, lock-at-fence, bad-setting,
    # or one of NETWORK_FAULTS / freeze-tool / cut-repl-link / ddl-at-fence / big-trx-at-fence / kill9-in-flight,
    # or one of RELAY_FAULTS (kill-relay, freeze-relay: rows with router="relay")
    where: str  # a key of the pause points, or the bad setting's name, or `<statement>@<length>`
    recovery: str  # resume, rollback, rerun (a new `dbmigrate run` of the same playbook), none
    pause: str | None  # DBMIGRATE_FAULT_PAUSE for the run
    statement: str | None = None  # a key of ROLE_STATEMENTS[procedure]: the statement the fault is timed on
    hold_s: float | None = None  # how long a partition lasts from its statement, or the tool stays frozen
    settings: tuple[tuple[str, float], ...] = ()  # the playbook's settings that differ from the matrix's
    after_exit_s: float = 0.0  # the verdict also covers this long after the tool (and the operator's command) exit
    router: str = "haproxy"  # the cluster's router for the row (and where the load writes): haproxy or relay

    @property
    def id(self) -> str:
        return f"{self.procedure}/{self.fault}/{self.where}/{self.recovery}"

    @property
    def fast(self) -> bool:
        return self.id in FAST or self.id in RELAY_FAST

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


@dataclass(frozen=True)
class RoleStatement:
    """A statement that changes a server's role: sent to `server` ("old" primary or
    "candidate"), recognised on the wire by `text`, given up by the tool after the bound
    `bound_setting` names (plus `bound_extra_s`); `after` pauses the run right after it."""

    server: str
    text: str
    bound_setting: str
    after: str
    bound_extra_s: float = 0.0

    def bound_s(self, settings: dict) -> float:
        return float(settings[self.bound_setting]) + self.bound_extra_s


# The fence's session is bounded by fence_timeout_s plus one second (its lock wait is the
# former); the open by catchup_timeout_s. A schema swap switches back with the same two
# statements, the other way round. The open is told by the tool's tag right before it: the
# fence's own request may carry `read_only=OFF` too (the body of its expiry on the server).
OPEN_TEXT = "*/ SET GLOBAL read_only=OFF"
_FENCE = RoleStatement("old", "read_only=ON", "fence_timeout_s", "in:fence:read_only=on", 1.0)
_OPEN = RoleStatement("candidate", OPEN_TEXT, "catchup_timeout_s", "in:open:read_only=off")
ROLE_STATEMENTS: dict[str, dict[str, RoleStatement]] = {
    "promote": {"fence": _FENCE, "open": _OPEN},
    "schema-swap": {
        "fence": _FENCE, "open": _OPEN,
        "switch-back-fence": RoleStatement("candidate", "read_only=ON", "fence_timeout_s",
                                           "in:switch back:read_only=on", 1.0),
        "switch-back-open": RoleStatement("old", OPEN_TEXT, "catchup_timeout_s",
                                          "in:switch back:read_only=off"),
    },
}
# Partitions starting with the statement's first packet: the old primary's port, the
# candidate's port, or only the connection that carried the statement (the tool's own).
NETWORK_FAULTS = ("partition-old", "partition-candidate", "partition-own-conn")
LENGTHS = (0.5, 1.0, 1.5)  # times the statement's bound
JUDGED_AFTER_EXIT_S = 30.0


def procedure_settings(procedure: str, settings: dict) -> dict:
    """The bounds a procedure's switchovers run with: the schema swap has no fence_timeout_s
    of its own and fences with the switchover's default."""
    if procedure == "schema-swap":
        return {**settings, "fence_timeout_s": SwitchoverParams().fence_timeout_s}
    return settings


def statement_of(sc: Scenario) -> RoleStatement | None:
    if sc.procedure == "consolidate":
        return CONSOLIDATE_STATEMENTS.get(sc.statement or "")
    return ROLE_STATEMENTS.get(sc.procedure, {}).get(sc.statement or "")


def network_matrix(settings: dict) -> list[Scenario]:
    """Every role-changing statement of promote and the schema swap: each partition for
    0.5x, 1x and 1.5x its bound (healed afterwards), and the tool frozen right after it for
    2x its bound. The candidate's replication link cut before the fence, a DDL and a large
    transaction in flight at the fence. Each judged 30 s after the tool exits."""
    out = []
    for procedure, statements in ROLE_STATEMENTS.items():
        for key, st in statements.items():
            bound = st.bound_s(procedure_settings(procedure, settings))
            for fault in NETWORK_FAULTS:
                for k in LENGTHS:
                    out.append(Scenario(procedure, fault, f"{key}@{k:g}x", "rollback", None, key,
                                        round(k * bound, 2), after_exit_s=JUDGED_AFTER_EXIT_S))
            out.append(Scenario(procedure, "freeze-tool", f"{key}@2x", "rollback", st.after, key,
                                round(2 * bound, 2), after_exit_s=JUDGED_AFTER_EXIT_S))
    out += [Scenario("promote", f, "before-fence", "rollback", "before:fence", after_exit_s=JUDGED_AFTER_EXIT_S)
            for f in ("cut-repl-link", "ddl-at-fence", "big-trx-at-fence")]
    return out


def issue_reproductions() -> list[Scenario]:
    """Three faults measured from outside that broke the promise before statements in
    doubt and the fence expiry: the candidate partitioned from its open for 4.6 s (its
    bound 5 s), the same dropping only the tool's own connection, the old primary
    partitioned 3.5 s from its fence, and the tool frozen 40 s after the fence."""
    after = JUDGED_AFTER_EXIT_S
    return [
        Scenario("promote", "partition-candidate", "open@4.6s", "rollback", None, "open", 4.6,
                 (("catchup_timeout_s", 5.0),), after),
        Scenario("promote", "partition-own-conn", "open@4.6s", "rollback", None, "open", 4.6,
                 (("catchup_timeout_s", 5.0),), after),
        Scenario("promote", "partition-old", "fence@3.5s", "rollback", None, "fence", 3.5, (), after),
        Scenario("promote", "freeze-tool", "fence@40s", "rollback", _FENCE.after, "fence", 40.0, (), after),
    ]


# Consolidation: the first old server's cutover (its fence, then the open of its new instance).
# "old" is that old server, "candidate" its instance. The fence is bounded like promote's
# (fence_timeout_s + 1), the open like promote's (catchup_timeout_s); the inventory's
# read_timeout (CONSOLIDATE_READ_TIMEOUT_S here) bounds the statements that have no bound of their own.
CONSOLIDATE_SETTINGS = {"fence_timeout_s": 2, "catchup_timeout_s": 3, "fence_drain_timeout_s": 0.3,
                        "gate_timeout_s": 20}
CONSOLIDATE_READ_TIMEOUT_S = 10
CONSOLIDATE_STATEMENTS = {
    "fence": RoleStatement("old", "read_only=ON", "fence_timeout_s", "in:cut over:read_only=on", 1.0),
    # The pause sees statements without the tool's tag; the fence's expiry body is spelled
    # `SET @@GLOBAL.read_only=0`, so this is the open.
    "open": RoleStatement("candidate", OPEN_TEXT, "catchup_timeout_s", "in:cut over:set global read_only=off"),
}
CONSOLIDATE_NETWORK_FAULTS = ("partition-old", "partition-new", "partition-own-conn")


# The step boundaries of the first old server's cutover (its steps are named `cut over <old>:
# <part>`; `{old}` is that server's name, filled in by the row): after each step (journaled as
# finished, the next not started), the tool killed -9, then the operator's `resume` or `rollback`.
CONSOLIDATE_BOUNDARIES = {
    "after-prechecks": "after:cut over {old}: checks before the fence",
    "after-fence": "after:cut over {old}: fence",
    "after-catchup": "after:cut over {old}: catch up",
    "after-check": "after:cut over {old}: check in the window",
    "after-journal": "after:cut over {old}: journal the reverse position",
    "after-routes": "after:cut over {old}: routes",
    "after-open": "after:cut over {old}: open",
    "after-reverse": "after:cut over {old}: reverse replication",
    "after-sessions": "after:cut over {old}: end sessions",
    "after-login": "after:cut over {old}: app login",
    "after-forward": "after:cut over {old}: forward connections",
}


def consolidate_settings() -> dict:
    return {**CONSOLIDATE_SETTINGS, "read_timeout_s": CONSOLIDATE_READ_TIMEOUT_S}


def consolidate_matrix() -> list[Scenario]:
    """The per-server fence and the open of the new instance: the old server's port, the new
    instance's port, or only the tool's own connection partitioned from the statement for
    0.5x, 1x and 1.5x its bound; the tool frozen right after it for 2x. Each ends rolled back
    (by the run or by the operator's one `rollback`). Then the tool killed -9 at every boundary
    between the steps of the first old server's cutover, followed by `resume` or `rollback`.
    Each judged 30 s after exit."""
    out = []
    settings = consolidate_settings()
    for key, st in CONSOLIDATE_STATEMENTS.items():
        bound = st.bound_s(settings)
        for fault in CONSOLIDATE_NETWORK_FAULTS:
            for k in LENGTHS:
                out.append(Scenario("consolidate", fault, f"{key}@{k:g}x", "rollback", None, key,
                                    round(k * bound, 2), after_exit_s=JUDGED_AFTER_EXIT_S))
        out.append(Scenario("consolidate", "freeze-tool", f"{key}@2x", "rollback", st.after, key,
                            round(2 * bound, 2), after_exit_s=JUDGED_AFTER_EXIT_S))
    out += [Scenario("consolidate", "kill9", where, rec, pause, after_exit_s=JUDGED_AFTER_EXIT_S)
            for where, pause in CONSOLIDATE_BOUNDARIES.items() for rec in RECOVERIES]
    return out


# kill -9 with a statement IN FLIGHT: the run pauses right before the mutating statement of a
# step (a `sending:` point), the statement's target is cut off (both directions of its port;
# HAProxy frozen with SIGSTOP for a router command), the run goes on and sends it into the cut,
# the tool is killed INFLIGHT_KILL_AFTER_S later (before its bound gives up on it), the cut
# heals INFLIGHT_HEAL_AFTER_S after the send (the statement still in the dead process's send
# queue, retransmitted), then the operator's one command: rollback, resume, or a new run of
# the same playbook. Judged 30 s after that command exits.
INFLIGHT_FAULT = "kill9-in-flight"
INFLIGHT_KILL_AFTER_S = 1.5
INFLIGHT_HEAL_AFTER_S = 7.0
INFLIGHT_COMMANDS = ("rollback", "resume", "rerun")
INFLIGHT_POINTS: dict[str, dict[str, str]] = {
    "promote": {
        "fence": "sending:fence:read_only=on",  # to the old primary
        "open": "sending:open:read_only=off",  # to the candidate
        "router-flip": "sending:switch router:set server",  # to HAProxy (frozen)
        "reset": "sending:reset replication:reset slave",  # to the new primary
        "repoint": "sending:repoint:change master",  # to the other replica
        "reverse": "sending:reverse:change master",  # to the old primary
    },
    "schema-swap": {
        "ddl": "sending:apply ddl on:alter table",  # to the first replica altered
        "fence": "sending:fence:read_only=on",  # to the primary (the swap's switchover)
        "open": "sending:open:read_only=off",  # to the temporary primary
        "switch-back-fence": "sending:switch back:read_only=on",  # to the temporary primary
        "switch-back-open": "sending:switch back:read_only=off",  # to the original primary
    },
    "consolidate": {
        "fence": "sending:cut over:read_only=on",  # to the first old server
        # The DSN file is a local file: the new instance (the route's target) is cut off as the
        # route moves to it, so what is in flight at the kill is that instance's open.
        "route-change": "sending:cut over:switch writer",
        "open": "sending:cut over:set global read_only=off",  # to the new instance
        "reverse": "sending:cut over:change master",  # to the old server (replicates back)
    },
}


def inflight_matrix() -> list[Scenario]:
    """Every mutating step of promote, schema swap and consolidation's per-server cutover, with
    its statement in flight at a kill -9, each followed by each operator command."""
    return [Scenario(procedure, INFLIGHT_FAULT, key, command, point, hold_s=INFLIGHT_HEAL_AFTER_S,
                     after_exit_s=JUDGED_AFTER_EXIT_S)
            for procedure, points in INFLIGHT_POINTS.items() for key, point in points.items()
            for command in INFLIGHT_COMMANDS]


# The candidate's datadir on a small filesystem of its own, filled right after the open.
DISK_FULL = Scenario("promote", "disk-full-candidate", "after-open", "rollback", "after:open",
                     after_exit_s=JUDGED_AFTER_EXIT_S)


# The relay in the path (relay/, router kind `relay`): the load and the zero-loss writer write through
# it, promote holds its sessions (hold_new_connections) and moves them at the open. The relay itself
# is the fault: killed -9 at a point of the promote and started again as systemd would (same flags;
# its -state file gives it the backend of its last move), at once or RELAY_RESTART_DELAY_S later; or
# frozen (SIGSTOP) with the move in its socket, continued after a bound. The tool goes on throughout.
RELAY_FAULTS = ("kill-relay", "freeze-relay")
RELAY_POINTS = {
    "after-hold": "in:fence:hold; seq",  # the relay holds every session; the old primary not fenced yet
    "in-fence": "in:fence:read_only=on",  # held and fenced: inside the window, the candidate not open
    "in-move": "sending:open:move ",  # the move in flight: the relay frozen with it in its socket, then killed
    "after-move": "in:open:move ",  # moved and released (one line, answered); the hold's last release not sent
    "after-open": "after:open",  # the open step done: the relay's backend is the new primary
}
RELAY_RESTART_DELAY_S = 5.0
RELAY_RESTARTS = {"now": 0.0, f"{RELAY_RESTART_DELAY_S:g}s": RELAY_RESTART_DELAY_S}
RELAY_CONTROL_TIMEOUT_S = 5.0  # RelayRouter's wait for an answer on the control socket
# Frozen with the move in its socket: half the tool's wait for an answer (it comes late), and twice
# it (the tool gives up: the move is in doubt until the relay goes on and runs it).
RELAY_FREEZES_S = (0.5 * RELAY_CONTROL_TIMEOUT_S, 2 * RELAY_CONTROL_TIMEOUT_S)
RELAY_SETTINGS: tuple[tuple[str, float], ...] = (("hold_new_connections", True),)


def relay_matrix() -> list[Scenario]:
    """The relay killed -9 at each point (restarted at once or after the delay), then the operator's
    `resume` or `rollback`; the relay frozen with the move in its socket, then `rollback`. Each judged
    30 s after exit."""
    out = [Scenario("promote", "kill-relay", f"{where}@{when}", rec, pause, hold_s=delay, settings=RELAY_SETTINGS,
                    after_exit_s=JUDGED_AFTER_EXIT_S, router="relay")
           for where, pause in RELAY_POINTS.items() for when, delay in RELAY_RESTARTS.items() for rec in RECOVERIES]
    out += [Scenario("promote", "freeze-relay", f"move@{s:g}s", "rollback", RELAY_POINTS["in-move"], hold_s=s,
                     settings=RELAY_SETTINGS, after_exit_s=JUDGED_AFTER_EXIT_S, router="relay")
            for s in RELAY_FREEZES_S]
    # The tool itself killed -9 at each of the relay's points, the relay left running: it holds the
    # sessions until its own bound (-max-hold-s) and sends them where its last move did.
    out += [Scenario("promote", "kill9", f"{where}@relay", rec, pause, settings=RELAY_SETTINGS,
                     after_exit_s=JUDGED_AFTER_EXIT_S, router="relay")
            for where, pause in RELAY_POINTS.items() for rec in RECOVERIES]
    return out


def all_scenarios(settings: dict | None = None) -> list[Scenario]:
    return (promote_matrix() + swap_matrix() + network_matrix(settings or SETTINGS) + issue_reproductions()
            + [DISK_FULL] + consolidate_matrix() + inflight_matrix() + relay_matrix())


def select(scenarios: list[Scenario], only: str | None = None, fast: bool = False) -> list[Scenario]:
    """--only takes comma-separated ids or glob patterns (`promote/kill9/*`, `*/in-fence/*`)."""
    picked = [s for s in scenarios if s.fast] if fast else list(scenarios)
    if only:
        patterns = [p.strip() for p in only.split(",") if p.strip()]
        picked = [s for s in picked if any(fnmatch.fnmatchcase(s.id, p) for p in patterns)]
    return picked
