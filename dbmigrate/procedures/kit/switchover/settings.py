"""The switchover's params: every bound of a switchover, declared once (the fence's in
FenceParams, kit/fence.py), and its constants.

Promote's and the schema swap's params inherit `SwitchoverParams`, and the kit (`Switchover`,
`Cutover`, the preflight gate) takes those params as they are: a playbook names each bound of a
switchover the same way in every procedure."""

from __future__ import annotations

from pydantic import Field

from dbmigrate.procedures.kit.fence import FenceParams


# The convergence loop polls slowly while the candidate is more than this many times the limit behind.
FAR_TIMES = 4

# The catch-up's first, short wait; only past it is the candidate's replication status read.
FIRST_CATCHUP_WAIT_S = 0.05

# A catch-up whose candidate receives nothing this long while behind renews its replication connection.
IO_STALL_S = 1.0

# A SQL thread seen stopped with an error this long is taken as stopped: it does not restart by
# itself (transient errors are retried by the server before the thread stops).
SQL_STOPPED_CONFIRM_S = 0.3

# How often the convergence looks again at work that is too big for the window: INNODB_TRX is
# a cache refreshed only when nobody read it for 0.1 s.
SIZE_LOOK_POLL_S = 0.11


class SwitchoverParams(FenceParams):
    """The switchover's bounds: the fence's (FenceParams) and its own, from the preflight to the
    verification."""

    # -- preflight (checked at the start, and again before the fence) ----------------------
    max_lag_ms: int = Field(1000, gt=0, le=3_600_000, description="preflight refuses while a replica is further "
                                                                  "behind than this (milliseconds)")
    lag_wait_s: float = Field(30, ge=0, le=600, description="how long preflight waits for lag to settle")
    max_trx_age_s: float = Field(30, gt=0, le=86400, description="preflight refuses while a transaction older than "
                                                                 "this is open on the primary: it would hold the "
                                                                 "fence")
    allow_read_only_bypass: list[str] = Field(
        default_factory=list, description="accounts that bypass read_only (SUPER, READ ONLY ADMIN) allowed to hold "
                                          "sessions on the old primary; their sessions are ended before the open")
    # -- convergence: the fence waits until the candidate is close, so that the catch-up inside
    # the fenced window (where writes are refused) stays short ------------------------------
    converge_timeout_s: float = Field(10, gt=0, le=300,
                                      description="how long the fence waits for the candidate to come close")
    converge_max_trx: int = Field(10, ge=0, le=10**9, description="fence only when the candidate is at most this "
                                                                      "many transactions behind (per domain)")
    converge_max_trx_rows: int = Field(10_000, ge=0, le=10**15, description="once converged, the fence also waits "
                                       "(up to converge_timeout_s, else refuses) while the old primary runs a DDL or "
                                       "a transaction that modified this many rows, or the candidate applies a DDL; "
                                       "0: do not look")
    converge_max_backlog_bytes: int = Field(1 << 20, ge=0, le=1 << 50, description="... or the candidate has more "
                                            "than this many bytes of the old primary's binlog still to apply; 0: do "
                                            "not look")
    converge_poll_s: float = Field(0.001, gt=0, le=1, description="how often the convergence reads the candidate's "
                                                                  "distance while it is close")
    converge_far_poll_s: float = Field(0.01, gt=0, le=1, description=f"... and while it is far behind (more than "
                                       f"{FAR_TIMES}x converge_max_trx): a tight loop would take a core from a "
                                       f"primary that may be saturated already")
    # -- the fenced window -----------------------------------------------------------------
    fence_drain_timeout_s: float = Field(2, ge=0, le=60, description="after the fence, how long open application "
                                                                     "transactions may take to finish")
    kill_app_sessions: bool = Field(True, description="end the application's sessions left on the fenced server, so "
                                                      "that pools reconnect through the router")
    hold_new_connections: bool = Field(False, description="opt-in: through an HAProxy router with a writer port, "
                                       "new connections wait in its queue from just before the fence until the "
                                       "candidate opens, and the old primary's writer sessions end when idle; "
                                       "through a relay router, every session waits at its next statement boundary "
                                       "and is moved to the candidate as it opens, none ended (the router's flip "
                                       "then moves into the open step: the relay killed or frozen there is in "
                                       "the fault matrix, the tool killed there is not yet); "
                                       "docs/operations/what-the-application-sees.md")
    admin_users: list[str] = Field(default_factory=list, description="accounts whose sessions on the fenced server "
                                   "are not ended (the tool's own and the replication account's never are)")
    catchup_timeout_s: float = Field(5, gt=0, le=300, description="after the fence, the candidate must apply the old "
                                     "primary's final position within this, or the old primary is unfenced and the "
                                     "run stops (bounds the write outage)")
    # -- after the open ----------------------------------------------------------------------
    replica_timeout_s: float = Field(30, gt=0, le=3600, description="bound for each other replica to reach the "
                                                                    "final position before it is repointed")
    verify_timeout_s: float = Field(10, gt=0, le=600, description="bound for the verification's probe write to "
                                                                  "reach every server")
    probe_timeout_s: float = Field(2, gt=0, le=60, description="how long an undo waits for a server to answer "
                                                               "before taking it as down")

    def expiry_s(self) -> float:
        """Seconds after which the old primary's fence expires by itself (0: never scheduled)."""
        return self.expiry_after(self.catchup_timeout_s)
