"""The switchover's bounds (the fence's are FenceParams, declared once in the kit) and its constants."""

from __future__ import annotations

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


class SwitchoverSettings(FenceParams):
    """The switchover's bounds: the fence's (FenceParams, declared once in the kit) and its own."""

    catchup_timeout_s: float = 5.0
    # The fence waits until the candidate is this close to the primary, so that the
    # catch-up inside the fenced window (where writes are refused) stays short.
    converge_timeout_s: float = 10.0
    converge_max_trx: int = 10  # transactions behind, per domain
    converge_poll_s: float = 0.001
    # While the candidate is far behind (more than FAR_TIMES x converge_max_trx) the loop polls
    # this slowly: a 1 ms loop is two reads per ms and most of a core, taken from a primary
    # and a machine that may be saturated already, for nothing until the candidate comes close.
    converge_far_poll_s: float = 0.01
    # Size, not only count: once converged, the fence also waits (within converge_timeout_s,
    # else refuses with the reason) while the old primary runs a DDL or a transaction that has
    # modified at least this many rows, or the candidate applies a DDL or has more than
    # converge_max_backlog_bytes of the old primary's binlog still to apply. Each of those is a
    # multi-second apply that would otherwise fall inside the fenced window.
    converge_max_trx_rows: int = 10_000
    converge_max_backlog_bytes: int = 1 << 20
    # How long an undo waits for one server to answer before taking it as down (frozen, dead).
    probe_timeout_s: float = 2.0
    drain_timeout_s: float = 2.0  # wait for in-flight app transactions after read_only
    kill_app_sessions: bool = True  # end remaining app sessions on the fenced server
    replica_timeout_s: float = 30.0  # bound for repointing each other replica
    admin_users: tuple[str, ...] = ()  # sessions never killed (the tool's own, replication)
    # A router change sent without an answer is in doubt: before the route is read or changed
    # again, wait this long for the router to show that it ran; past it, stop and say how to finish.
    router_doubt_wait_s: float = 10.0

    def expiry_s(self) -> float:
        """Seconds after which the old primary's fence expires by itself (0: never scheduled)."""
        return self.expiry_after(self.catchup_timeout_s)
