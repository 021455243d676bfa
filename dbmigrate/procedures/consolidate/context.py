"""What every part of a consolidation reads from the run: params, plan, servers, routes, state."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Optional, Protocol

from pydantic import BaseModel, ConfigDict, Field

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import Server
from dbmigrate.engine.step import RunContext
from dbmigrate.exceptions import DbmigrateError, Refused, UsageError
from dbmigrate.procedures.consolidate.plan import ConsolidationPlan, PlannedInstance
from dbmigrate.procedures.consolidate.resources import ConsolidateResources, ConsolidateState
from dbmigrate.procedures.kit.fence import FenceParams
from dbmigrate.procedures.kit.resources import required, typed
from dbmigrate.procedures.kit.switchover.router import JournaledRouter
from dbmigrate.routing.dsn_file import DsnFileRouter
from dbmigrate.routing.relay import RelayRouter

@dataclass(frozen=True)
class PlanOnly:
    """The resources of a consolidation that `dbmigrate plan` builds without servers: its plan."""

    plan: ConsolidationPlan


class ConsolidateError(DbmigrateError):
    """A consolidation step could not do its work (the message says which and why)."""


class ConsolidateRefused(ConsolidateError, Refused):
    """A consolidation step declined and changed nothing (not caught up, a fence that gave up)."""


class SeedSettings(BaseModel):
    """How instances are seeded, and how hard the copy may press on the old server."""

    model_config = ConfigDict(extra="forbid")
    method: Literal["auto", "physical", "logical"] = Field(
        "auto", description="physical: mariadb-backup streamed host to host; logical: mariadb-dump; auto: physical "
                            "for an instance fed by one old server of the same version whose hosts are reachable")
    throttle_mb_s: float = Field(0, ge=0, le=100_000, description="cap on the copy's rate in MB/s (0: no cap)")
    max_source_p999_ms: Optional[float] = Field(50, gt=0, le=60_000, description="pause the copy while the old "
                                                "server's probe p99.9 latency is above this (ms); null: never")
    max_source_lag_s: Optional[float] = Field(10, ge=0, le=86_400, description="pause the copy while a replica "
                                              "of the old server is further behind than this (s); null: never")
    probe_per_s: float = Field(100, gt=0, le=1000, description="latency probes per second on the old server")
    write_probe_per_s: float = Field(10, ge=0, le=100, description="heartbeat writes per second on the old server "
                                     "(the tool's own row): a commit's wait counts in the p99.9 like a read's (0: none)")
    window_s: float = Field(5, gt=0, le=600, description="the probe window p99.9 is computed over (s)")
    progress_every_s: float = Field(10, gt=0, le=3600, description="how often the copy reports rate and ETA (s)")
    global_grants: bool = Field(False, description="a logical copy also copies the global grants (ON *.*) of the "
                                                   "accounts it copies, and accounts that hold only global ones")


class FleetSettings(BaseModel):
    """Many old servers in one run: how many at once, and what one failure does to the others."""

    model_config = ConfigDict(extra="forbid")
    concurrency: int = Field(1, ge=1, le=64, description="old servers seeded or cut over (and planned instances "
                                                          "provisioned) at the same time")
    on_failure: Literal["continue", "stop", "rollback"] = Field(
        "continue", description="continue: the others go on and the run ends failed, naming it (resume retries "
                                "it); stop: no further server starts; rollback: the whole run is undone")


class ConsolidateParams(FenceParams):
    """The fence's fields come from FenceParams (the same in every procedure). Consolidation is
    not a switchover: catchup_timeout_s and fence_drain_timeout_s mean what they mean there, with
    defaults of their own. `drain_timeout_s` is read as `fence_drain_timeout_s`, its former name."""

    RENAMED = {"drain_timeout_s": "fence_drain_timeout_s"}
    plan: str = Field(description="plan file written by `dbmigrate consolidate plan --out` (relative to the playbook)")
    strategy: Literal["instance-per-group", "merge"] = "instance-per-group"
    routes: Optional[str] = Field(None, description="DSN file with one entry per shard; default: the cluster's "
                                                    "dsn-file router")
    max_lag_s: float = Field(5, ge=0, le=3600, description="catch-up gate: seconds behind on every connection")
    gate_timeout_s: float = Field(30, ge=0, le=3600, description="how long the catch-up gate waits for that")
    catchup_timeout_s: float = Field(10, gt=0, le=600, description="fenced wait for an instance to apply an "
                                                                   "old server's final position")
    checksum: bool = Field(True, description="verify the copy: chunked checksums old vs instance before the fence "
                                             "(while replicating), only the ranges that kept changing again inside it")
    check_chunk_mb: float = Field(4, gt=0, le=1024, description="size of one checksummed key range")
    fenced_check_max_chunks: int = Field(16, ge=0, le=100_000, description="refuse to fence when more ranges than "
                                         "this kept changing before the fence (each is compared inside the window)")
    kill_app_sessions: bool = Field(True, description="once the routes name the instances, end the application's "
                                                      "sessions on the old server so that pools reconnect through "
                                                      "the new route")
    app_reach_timeout_s: float = Field(10, ge=0, le=600, description="after the switch, how long to wait for every "
                                       "account seen on the old server to have a session on its instance (a "
                                       "warning past it: an idle application may just not have come back yet)")
    fence_drain_timeout_s: float = Field(1, ge=0, le=60, description="after the fence, how long open application "
                                                                     "transactions may take to finish; through a "
                                                                     "relay, before it: how long its held sessions "
                                                                     "may take to be idle")
    seed_timeout_s: float = Field(3600, gt=0, le=7 * 86400)
    seed: SeedSettings = Field(default_factory=SeedSettings)
    fleet: FleetSettings = Field(default_factory=FleetSettings)


# What a consolidation's steps see: a run's resources, or the PlanOnly that `build` keeps when
# `plan` builds without any (`resources_of` tells them apart); `build` may see none yet.
ConsolidateContext = RunContext[ConsolidateParams, "ConsolidateResources | PlanOnly"]
ConsolidateBuildContext = RunContext[ConsolidateParams, "ConsolidateResources | PlanOnly | None"]


def resources_of(ctx: ConsolidateContext) -> ConsolidateResources:
    return required(ctx, ConsolidateResources)


def plan_of(ctx: ConsolidateContext) -> ConsolidationPlan:
    r = typed(ctx, ConsolidateResources)
    return r.plan if r is not None else required(ctx, PlanOnly).plan


def state_of(ctx: ConsolidateContext) -> ConsolidateState:
    return ConsolidateState.load(ctx.state)


_STATE_LOCK = threading.RLock()  # fleet workers edit the run state from several threads


@contextmanager
def edit_state(ctx: ConsolidateContext) -> Iterator[ConsolidateState]:
    """Load, change and save the run state as one unit, even with fleet workers in parallel."""
    with _STATE_LOCK, ConsolidateState.edit(ctx.state) as st:
        yield st


def is_cut(ctx: ConsolidateContext, source: str) -> bool:
    return source in state_of(ctx).cut


def server_of(ctx: ConsolidateContext, name: str) -> Server:
    return resources_of(ctx).servers[name]


def applier_of(ctx: ConsolidateContext, name: str) -> Applier:
    srv = server_of(ctx, name)
    return Applier(srv, dry_run=ctx.dry_run, on_planned=lambda s, sql: ctx.record_statement(s, sql))


class ShardRoute(Protocol):
    """A shard's writer route: its DSN entry, or its relay (through the run's journaled router)."""

    def current(self) -> Any: ...  # RouteState: .writer "host:port"
    def switch_writer(self, new: Any, old: Any = None, *, persist: bool = True) -> Any: ...


def route_of(ctx: ConsolidateContext, shard: str) -> ShardRoute:
    res = resources_of(ctx)
    spec = res.relays.get(shard)
    if spec is not None:
        return relay_route(ctx, shard, spec.control_socket, spec.address)
    if res.routes is None:
        raise UsageError(f"shard {shard} has neither a relay (shard_routers) nor a DSN file to route it")
    return DsnFileRouter(shard, res.routes)


class RelayJournal:
    """One relay's changes in the run state (kit/switchover/router.py's RouteJournal): each sent
    change journaled before it is sent, cleared once answered; one in doubt is settled (seen run,
    or gone with the relay's process) before that relay is read or changed again. Numbered for the
    whole run: a late line of an older decision is refused by the relay (its `seq`)."""

    def __init__(self, ctx: ConsolidateContext, control: str):
        self.ctx, self.control = ctx, control

    def pending(self) -> dict[str, Any] | None:
        return state_of(self.ctx).relay_changes.get(self.control)

    def last_seq(self) -> int:
        return state_of(self.ctx).relay_seq

    def sent(self, change: dict[str, Any]) -> None:
        with edit_state(self.ctx) as st:
            st.relay_changes[self.control] = {**change, "sent_at": self.ctx.clock.now()}
            st.relay_seq = max(st.relay_seq, int(change["seq"]))

    def answered(self, seq: int) -> None:
        with edit_state(self.ctx) as st:
            change = st.relay_changes.get(self.control)
            if change is not None and int(change["seq"]) <= seq:
                st.relay_changes.pop(self.control)


def relay_route(ctx: ConsolidateContext, shard: str, control: str, address: str | None = None) -> JournaledRouter:
    """The relay of a shard (or of several: one control socket, one route), journaled as promote's router."""
    return JournaledRouter(RelayRouter(shard, control, address), RelayJournal(ctx, control), ctx.clock,
                           ctx.params.router_doubt_wait_s, ctx.log)


def address_of(ctx: ConsolidateContext, name: str) -> str:
    return resources_of(ctx).servers.address(name)


def shards_of(plan: ConsolidationPlan, instance: str, source: str) -> list[str]:
    inst = plan.instance(instance)
    return [s for s in inst.shards if inst.shard_sources[s] == source]


def targets_of(plan: ConsolidationPlan, source: str) -> list[PlannedInstance]:
    return [i for i in plan.instances if source in i.sources]


def wild_patterns(shards: list[str]) -> list[str]:
    return [f"{s}.%" for s in shards]

