"""What a promote run opens (typed resources) and what it journals (typed run state)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, runtime_checkable

from dbmigrate.engine.playbook_view import PlaybookView
from dbmigrate.engine.state import TypedState
from dbmigrate.engine.step import RunState
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures.contract import Prepared
from dbmigrate.procedures.kit.resources import ClusterResources, OnCluster, handed_over, inventory_of, open_cluster
from dbmigrate.procedures.kit.switchover import SwitchoverServers


@runtime_checkable
class NamesCandidate(Protocol):
    """What prepare reads of promote's params (PromoteParams imports this module: no cycle)."""

    candidate: str


class PromoteState(TypedState):
    """Roles decided at the start (the topology is mid-change on resume) and what the read share changed."""

    KEY = "promote"
    FLAT_KEYS = {"old": "old", "new": "new", "reader_weights_before": "reader_weights_before"}

    old: Optional[str] = None
    new: Optional[str] = None
    reader_weights_before: Optional[dict[str, int]] = None


@dataclass
class PromoteResources(OnCluster):
    cluster: ClusterResources
    old: str
    new: str
    topology: SwitchoverServers
    old_gone: bool = False  # the operator asked to complete without the old primary (dead after the fence)


def prepare(playbook: PlaybookView, store: RunState | None, *, old_gone: bool = False) -> Prepared:
    """Open the cluster's servers and decide old primary / candidate / other replicas.

    On resume the roles come from the run's journaled state (the topology is
    mid-change and discovery could not tell them apart). With `old_gone` the lock
    and the lease go to the candidate, and the old primary is never asked.
    """
    params = playbook.params
    if not isinstance(params, NamesCandidate):
        raise TypeError(f"promote's resources need params that name a candidate, not {type(params).__name__}")
    inv = inventory_of(playbook)
    candidate = params.candidate
    cand_cluster, cand_spec = inv.find_server(candidate)
    new = inv.server_name(cand_spec)
    if cand_cluster != playbook.cluster:
        raise UsageError(f"candidate {candidate} belongs to cluster '{cand_cluster}', "
                         f"not '{playbook.cluster}'")
    state = PromoteState.load(store) if store is not None else PromoteState()
    if old_gone and (state.old is None or state.new is None):
        raise UsageError("this run never decided its old primary and candidate: there is nothing to complete",
                         hint="start a new run")
    cluster = open_cluster(playbook, primary=state.new if old_gone else state.old)
    old = state.old if old_gone else cluster.primary
    if old is None:
        cluster.close_all()
        raise UsageError(f"cluster '{playbook.cluster}' has no primary to promote from")
    if state.old is None:
        if old == new:
            cluster.close_all()
            raise UsageError(f"{new} is already the primary of '{playbook.cluster}'", hint="nothing to promote")
        if store is not None:
            state.old, state.new = old, new
            state.save(store)
    replicas = [n for n in cluster.servers if n not in (old, new)]
    resources = PromoteResources(cluster=cluster, old=old, new=new, topology=cluster.topology(replicas),
                                 old_gone=old_gone)
    return handed_over(resources, cluster.lock_session, cluster)
