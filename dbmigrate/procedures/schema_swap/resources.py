"""What a schema swap opens (typed resources) and what it journals (typed run state)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from dbmigrate.db.inspector import Inspector
from dbmigrate.digest.model import Digest
from dbmigrate.engine.playbook_view import PlaybookView, typed_params
from dbmigrate.engine.state import TypedState
from dbmigrate.engine.step import RunState
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures.contract import Prepared
from dbmigrate.procedures.kit.resources import ClusterResources, OnCluster, handed_over, open_cluster
from dbmigrate.procedures.kit.switchover import SwitchoverServers
from dbmigrate.procedures.schema_swap.expect import ddl_applied
from dbmigrate.procedures.schema_swap.params import SchemaSwapParams


class SchemaSwapState(TypedState):
    """Roles decided once per run (kept on resume although the topology is mid-change) and
    the reader pool as this run found and changed it."""

    KEY = "schema_swap"
    FLAT_KEYS = {"primary": "swap_primary", "sides": "swap_sides", "primary_altered": "swap_primary_altered",
                 "readers_at_start": "readers_at_start"}

    primary: Optional[str] = None
    sides: Optional[list[str]] = None
    primary_altered: Optional[bool] = None  # the primary had the change before this run started
    readers_at_start: Optional[list[str]] = None
    # side -> the reader pool before this run took the side out / readers added meanwhile
    readers_before: dict[str, list[str]] = Field(default_factory=dict)
    readers_added: dict[str, list[str]] = Field(default_factory=dict)

    @classmethod
    def from_flat(cls, flat: dict[str, Any]) -> dict[str, Any]:
        out = super().from_flat(flat)
        for field in ("readers_before", "readers_added"):
            prefix = f"{field}:"
            out[field] = {k[len(prefix):]: v for k, v in flat.items() if k.startswith(prefix) and v is not None}
        return out


@dataclass
class SchemaSwapResources(OnCluster):
    cluster: ClusterResources
    sides: list[str]
    candidate: str
    primary_altered: bool
    topology: SwitchoverServers  # for the primary's switchover: the sides other than the candidate move
    replay: Optional[Digest] = None  # the application's queries, tried on each side before it returns

    @property
    def primary(self) -> str:
        return self.cluster.primary


def candidate_of(inv: Any, params: SchemaSwapParams, sides: list[str]) -> str:
    if not params.candidate:
        return sides[0]
    _, spec = inv.find_server(params.candidate)
    name = str(inv.server_name(spec))
    if name not in sides:
        raise UsageError(f"candidate {params.candidate} is not a replica of this cluster",
                         hint=f"replicas: {', '.join(sides)}")
    return name


def replay_digest(playbook: PlaybookView, params: SchemaSwapParams) -> Digest | None:
    """The playbook's replay digest, read before anything changes (a bad file is refused here)."""
    if not params.replay_digest:
        return None
    path = Path(params.replay_digest).expanduser()
    if not path.is_absolute():
        path = (playbook.base_dir / path).resolve()
    if not path.is_file():
        raise UsageError(f"replay_digest {path} does not exist",
                         hint="capture one: dbmigrate digest capture ... --out FILE, or remove replay_digest")
    return Digest.load(path)


def prepare(playbook: PlaybookView, store: RunState, *, old_gone: bool = False) -> Prepared:
    """Open the cluster's servers; decide primary, sides and candidate (journaled, so that a
    resumed run keeps them although the topology is mid-change)."""
    params = typed_params(playbook, SchemaSwapParams)
    replay = replay_digest(playbook, params)  # a file: read before any server is opened
    state = SchemaSwapState.load(store)
    cluster = open_cluster(playbook, primary=state.primary)
    try:
        if state.primary is None:
            state.primary = cluster.primary
            state.sides = [n for n in cluster.servers if n != cluster.primary]
        sides = list(state.sides or [])
        if not sides:
            raise UsageError(f"cluster '{playbook.cluster}' has no replica: a schema swap needs at least one",
                             hint="apply the DDL with an online schema change tool instead")
        candidate = candidate_of(cluster.inventory, params, sides)
        if state.primary_altered is None:
            # Decided once per run: after the switchover the old primary is altered by this run.
            insp = Inspector(cluster.servers[cluster.primary])
            state.primary_altered = all(ddl_applied(insp, d) for d in params.statements())
        state.save(store)
    except BaseException:
        cluster.close_all()
        raise
    resources = SchemaSwapResources(cluster=cluster, sides=sides, candidate=candidate,
                                    primary_altered=bool(state.primary_altered),
                                    topology=cluster.topology([s for s in sides if s != candidate]),
                                    replay=replay)
    return handed_over(resources, cluster.lock_session, cluster)
