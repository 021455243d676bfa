"""Rehearsals: the real playbooks against a throwaway local sandbox under load.

`rehearse_promote` builds a primary, two replicas and a "new hardware"
candidate (bigger buffer pool), puts HAProxy in front, runs sysbench plus the
zero-loss verifier through it, runs the promote playbook on the engine and
reports what an operator wants to know before doing it for real: the fenced
window, lost writes (must be 0), the shape before and after, and the load's
TPS/latency before and after. Everything is torn down afterwards.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from dbmigrate.config import load_inventory
from dbmigrate.db.inspector import Inspector
from dbmigrate.sandbox.manager import Sandboxes

Progress = Callable[[str], None]


def _shape(inv, cluster: str) -> list[dict[str, Any]]:
    """Who replicates from whom, read from the servers (not from the inventory)."""
    out = []
    addr_to_name = {f"{s.host}:{s.port}": n for n, s in inv.cluster(cluster).servers.items()}
    for name in inv.cluster(cluster).servers:
        with inv.open(name) as srv:
            insp = Inspector(srv)
            st = insp.replica_status()
            source = f"{st.source_host}:{st.source_port}" if st and st.source_host else None
            out.append({"name": name, "read_only": insp.read_only(),
                        "source": addr_to_name.get(source, source) if source else None,
                        "replicating": bool(st and st.running)})
    return out


def _write_playbook(path: Path, inventory: Path, cluster: str, candidate: str, extra: dict[str, Any]) -> Path:
    doc = {
        "procedure": "promote",
        "inventory": str(inventory),
        "cluster": cluster,
        "params": {"candidate": candidate, "catchup_timeout_s": 5, "drain_timeout_s": 1, **extra.get("params", {})},
        "gates": [{"name": "operator go-ahead", "kind": "manual", "before": "cutover"}],
    }
    for key in ("guard", "hooks"):
        if key in extra:
            doc[key] = extra[key]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def rehearse_promote(*, progress: Progress | None = None, load_seconds: int = 5, keep: bool = False,
                     subscribers=(), playbook_extra: dict[str, Any] | None = None,
                     before_cutover: Callable[[Any, str, str], None] | None = None) -> dict[str, Any]:
    from dbmigrate.cli.runs import start_run
    from dbmigrate.sandbox import haproxy
    from dbmigrate.tools.sysbench import Sysbench
    from dbmigrate.verify.writer import ZeroLossVerifier

    say = progress or (lambda m: None)
    boxes = Sandboxes(progress=say)
    name = f"rehearsal-{secrets.token_hex(2)}"
    t0 = time.monotonic()
    state = boxes.up(name, replicas=2)
    verifier = background = None
    try:
        candidate = f"{name}-new"
        boxes.add_instance(name, candidate, replica_of=f"{name}-1", buffer_pool_mb=256)
        haproxy.start(boxes, name)
        state = boxes.find(name)
        inv = load_inventory(state.inventory_file)
        say(f"sandbox {name}: primary {name}-1, replicas {name}-2 {name}-3, candidate {candidate}, HAProxy in front "
            f"({time.monotonic() - t0:.1f}s)")
        shape_before = _shape(inv, name)

        bench = Sysbench.for_cluster(inv, name, workload="oltp_write_only", tables=2, table_size=2000, threads=2)
        bench.prepare()
        say(f"sysbench oltp_write_only for {load_seconds}s on the old primary")
        load_before = bench.run(time_s=load_seconds)

        verifier = ZeroLossVerifier.for_cluster(inv, name)
        verifier.prepare()
        verifier.start()
        # Steady write load through the switchover. Debian's sysbench 1.0.20 dies on its
        # first reconnect after a router flip (upstream #527), so it is restarted afterwards.
        background = bench.start_background(time_s=120)
        verifier.wait_for_acks(50)
        if before_cutover:
            before_cutover(inv, name, candidate)

        playbook = _write_playbook(state.path / "promote.yaml", state.inventory_file, name, candidate,
                                   playbook_extra or {})
        say(f"running playbook {playbook.name}: promote {candidate}")
        outcome = start_run(playbook, subscribers=subscribers, assume_yes=True)
        time.sleep(0.3)  # a few writes on the final primary before the check
        try:
            background.stop()
        except Exception:
            pass  # it may have died at the flip (see above); the verifier is the judge
        background = None
        verifier.stop()

        shape_after = _shape(inv, name)
        primary = next(s["name"] for s in shape_after if not s["read_only"])
        servers = [inv.open(s["name"]) for s in shape_after]
        try:
            report = verifier.check(servers)
        finally:
            for s in servers:
                s.close()
        verifier = None
        say(f"sysbench oltp_write_only for {load_seconds}s on the new primary")
        load_after = Sysbench.for_cluster(inv, name, workload="oltp_write_only", tables=2, table_size=2000,
                                          threads=2).run(time_s=load_seconds)
        old = next(s for s in shape_after if s["name"] == f"{name}-1")
        rolled_back = primary == f"{name}-1"
        return {
            "sandbox": name,
            "run_id": outcome.run_id,
            "run_status": outcome.status,
            "new_primary": primary,
            "candidate": candidate,
            "rolled_back": rolled_back,
            "old_primary_replicating": bool(not rolled_back and old["replicating"] and old["source"] == candidate),
            "lost_writes": report.lost_total,
            "acknowledged_writes": report.acknowledged,
            "fenced_ms": round(report.max_gap_ms or 0.0, 1),
            "verifier": report.to_dict(),
            "topology_before": shape_before,
            "topology_after": shape_after,
            "load_before": load_before.to_dict(),
            "load_after": load_after.to_dict(),
            "elapsed_s": round(time.monotonic() - t0, 1),
        }
    finally:
        if background is not None:
            try:
                background.stop()
            except Exception:
                pass
        if verifier is not None:
            verifier.stop()
        if not keep:
            boxes.down(name)
