"""Shared pieces for promote scenarios: a topology with a "new hardware" candidate
behind HAProxy, a playbook writer, and the zero-loss verifier around a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dbmigrate.app.runs import resolve_journal_path
from dbmigrate.config import load_inventory
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.journal import Journal
from dbmigrate.rehearsal.sandbox import haproxy
from dbmigrate.rehearsal.verify import ZeroLossVerifier


def topology(boxes, name: str):
    """primary NAME-1, replicas NAME-2, NAME-3, candidate NAME-new; HAProxy in front."""
    boxes.up(name, 2)
    boxes.add_instance(name, f"{name}-new", replica_of=f"{name}-1", buffer_pool_mb=128)
    haproxy.start(boxes, name)
    state = boxes.find(name)
    return state, load_inventory(state.inventory_file)


def playbook(state, name: str, params: dict[str, Any] | None = None, **extra) -> Path:
    doc = {"procedure": "promote", "inventory": str(state.inventory_file), "cluster": name,
           "params": {"candidate": f"{name}-new", "catchup_timeout_s": 3, "fence_drain_timeout_s": 0.5, **(params or {})},
           **extra}
    path = state.path / f"promote-{len(list(state.path.glob('promote-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def shape(inv, cluster: str) -> dict[str, dict[str, Any]]:
    addr = {f"{s.host}:{s.port}": n for n, s in inv.cluster(cluster).servers.items()}
    out = {}
    for n in inv.cluster(cluster).servers:
        with inv.open(n) as srv:
            i = Inspector(srv)
            st = i.replica_status()
            out[n] = {"read_only": i.read_only(),
                      "source": addr.get(f"{st.source_host}:{st.source_port}") if st and st.source_host else None,
                      "running": bool(st and st.running)}
    return out


def writers(s: dict[str, dict[str, Any]]) -> list[str]:
    return [n for n, v in s.items() if not v["read_only"]]


def start_verifier(inv, name: str) -> ZeroLossVerifier:
    v = ZeroLossVerifier.for_cluster(inv, name)
    v.prepare()
    v.start()
    v.wait_for_acks(30)
    return v


def finish_verifier(v: ZeroLossVerifier, inv, name: str):
    v.wait_for_acks(len(v.acks) + 20, timeout_s=15)  # writes flow again after the run
    v.stop()
    servers = [inv.open(n) for n in inv.cluster(name).servers]
    try:
        return v.check(servers, catch_up_timeout_s=60)
    finally:
        for s in servers:
            s.close()


def fence_sentence(run_id: str) -> str:
    """What the run's fence step said (its run, not an undo), from the journal."""
    with Journal(resolve_journal_path()) as j:
        steps = j.run_detail(run_id)["steps"]
    return next(s["sentence"] for s in steps if s["name"].startswith("fence ") and s["action"] == "run")
