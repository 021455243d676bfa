"""`dbmigrate rehearse schema-swap`: the weekly A/B schema change on a throwaway sandbox, under load.

A primary and two replicas behind HAProxy (writer and reader backends), app.orders filled,
reads through the reader port, sysbench and the zero-loss verifier writing through the writer
port. The schema-swap procedure then alters each replica out of the reader pool (binlog off),
switches over to an altered replica, alters the old primary and switches back. Afterwards
every server must carry the new column and index, no acknowledged write may be missing, and
the original primary takes writes again with both replicas under it.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import yaml

from dbmigrate.rehearsal.playbook_defaults import REHEARSAL_FENCE
from dbmigrate.config import load_inventory
from dbmigrate.clock import Clock
from dbmigrate.rehearsal.evidence import record_client_evidence, record_evidence, write_evidence
from dbmigrate.rehearsal.rehearse import (
    Progress, check_router, check_shape_options, client_summary, finish_shape, relay_users_reloaded,
    replication_shape, run_write_gaps, start_clients, start_shape, start_workload, stop_workload, tear_down,
    wait_applied,
)
from dbmigrate.rehearsal.driver import DirectDriver, Driver
from dbmigrate.rehearsal.sandbox.manager import Sandboxes

COLUMN, INDEX = "rehearsal_note", "idx_rehearsal_amount"
DDL = f"ALTER TABLE app.orders ADD COLUMN {COLUMN} VARCHAR(64) NULL, ADD INDEX {INDEX} (amount)"
UNDO_DDL = f"ALTER TABLE app.orders DROP INDEX {INDEX}, DROP COLUMN {COLUMN}"


def swap_playbook(path: Path, inventory: Path, cluster: str, candidate: str, hold: bool = False) -> Path:
    doc = {"procedure": "schema-swap", "inventory": str(inventory), "cluster": cluster,
           "params": {"ddl": [DDL], "undo_ddl": [UNDO_DDL],
                      "verify": [{"table": "app.orders", "column": COLUMN}],
                      "warm": {"method": "scan", "tables": ["app.orders"], "target_hit_ratio": 0.9, "seconds": 30},
                      "primary": "switchover", "candidate": candidate, "switch_back": True,
                      "drain_timeout_s": 2, "catchup_timeout_s": 3, "max_lag_ms": 5000, **REHEARSAL_FENCE,
                      **({"hold_new_connections": True} if hold else {})}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def altered(inv, server: str) -> bool:
    with inv.open(server) as s:
        create = s.query("SHOW CREATE TABLE app.orders")[0]["Create Table"]
    return f"`{COLUMN}`" in create and f"`{INDEX}`" in create


def rehearse_schema_swap(*, progress: Progress | None = None, keep: bool = False, subscribers=(),
                         name: str | None = None, rows: int = 5000, compose: bool = False,
                         shape: Path | None = None, scale: float = 0.01,
                         driver: Driver | None = None, hold: bool = False, router: str = "haproxy") -> dict[str, Any]:
    from dbmigrate.rehearsal.readload import create_orders
    from dbmigrate.rehearsal.sandbox import haproxy
    from dbmigrate.rehearsal.sysbench import Sysbench

    say = progress or (lambda m: None)
    driver = driver or DirectDriver(subscribers)
    shape_files = check_shape_options(shape, scale) if shape is not None else None
    check_router(router, compose)
    hold = hold or router == "relay"  # what the relay is for: sessions held and moved, none ended
    boxes = Sandboxes(progress=say)
    name = name or f"swap-{secrets.token_hex(2)}"
    t0 = time.monotonic()
    topo = None
    if compose:
        from dbmigrate.rehearsal.compose.run import ComposeRun

        state = topo = ComposeRun(name, {f"{name}-1": "db1", f"{name}-2": "db2", f"{name}-3": "db3"},
                                  progress=say, keep=keep).up()
    else:
        boxes.up(name, replicas=2)
    verifier = background = reads = replay = clients = None
    shaped: dict[str, Any] = {}
    try:
        if not compose and router == "relay":
            from dbmigrate.rehearsal.sandbox import relay

            relay.start(boxes, name, max_hold_s=15)  # the cluster's router: the inventory names it
            state = boxes.find(name)
        elif not compose:
            haproxy.start(boxes, name)
            state = boxes.find(name)
        inv = load_inventory(state.inventory_file)
        primary, candidate = f"{name}-1", f"{name}-2"
        with inv.open(primary) as p:
            create_orders(p, rows=rows, customers=500)
        for replica in (f"{name}-2", f"{name}-3"):
            wait_applied(inv, name, replica)
        say(f"{'compose topology' if compose else 'sandbox'} {name}: primary {primary}, replicas {name}-2 {name}-3, "
            f"{'the relay in front (writes; reads on the writer too)' if router == 'relay' else 'HAProxy writer and reader backends'}, "
            f"app.orders with {rows} rows ({time.monotonic() - t0:.1f}s)")
        shape_before = replication_shape(inv, name)

        bench = Sysbench.for_cluster(inv, name, workload="oltp_write_only", tables=2, table_size=2000, threads=2)
        bench.prepare()
        reads, verifier, background = start_workload(inv, name, bench, inv.cluster(name).read_address(), 180)
        clients = start_clients(inv, name)
        if shape_files is not None:
            replay = start_shape(boxes, name, inv, shape_files, scale, say, shaped, compose=topo,
                                 loaded=relay_users_reloaded(boxes, name) if router == "relay" else None)
            Clock().sleep(2)  # the classes' "before"

        playbook = swap_playbook(state.path / "schema-swap.yaml", state.inventory_file, name, candidate, hold)
        say(f"running playbook {playbook.name}: {DDL} on each side, one at a time, then back to {primary}")
        shaped["cutover_began"] = time.time()
        outcome = driver.run(playbook)
        if replay is not None:
            finish_shape(replay, shaped, time.time(), 2)
            replay = None
        Clock().sleep(0.3)  # a few writes on the final primary before the check
        try:
            background.stop()
        except Exception:
            pass  # it may have died at a flip (see above)
        background = None
        verifier.stop()
        acks = verifier.acks
        seen = client_summary(clients)
        clients = None
        reads.stop()
        reads_summary = reads.summary()
        read_samples = reads.samples_wall()
        reads = None

        shape_after = replication_shape(inv, name)
        writable = [s["name"] for s in shape_after if not s["read_only"]]
        servers = [inv.open(s["name"]) for s in shape_after]
        try:
            report = verifier.check(servers, catch_up_timeout_s=60)
        finally:
            for s in servers:
                s.close()
        verifier = None
        gaps = run_write_gaps(outcome.run_id, acks)
        # The report (`--report`, `runs report RUN`) carries what the console shows.
        record_evidence(outcome.run_id, write_evidence(acks=acks, verify=report, gaps=gaps,
                                                       read_samples=read_samples))
        record_client_evidence(outcome.run_id, seen)
        return {
            "sandbox": name,
            "router": router,
            "run_id": outcome.run_id,
            "run_status": outcome.status,
            "summary": outcome.summary,
            "ddl": DDL,
            "altered": {s["name"]: altered(inv, s["name"]) for s in shape_after},
            "writable": writable,
            "primary_back": writable == [primary],
            "lost_writes": report.lost_total,
            "acknowledged_writes": report.acknowledged,
            **gaps,
            **seen,
            "reads": reads_summary,
            "topology_before": shape_before,
            "topology_after": shape_after,
            "elapsed_s": round(time.monotonic() - t0, 1),
            **({"compose": topo.facts()} if topo is not None else {}),
            **({"shape": shaped["summary"], "classes": shaped["classes"]} if shape_files is not None else {}),
        }
    finally:
        if replay is not None:
            replay.stop()
        if clients is not None:
            clients.stop()
        stop_workload(background, verifier, reads)
        if not keep:
            tear_down(topo, boxes, name)


def succeeded(report: dict[str, Any]) -> bool:
    return (report["run_status"] == "done" and report["lost_writes"] == 0 and report["primary_back"]
            and all(report["altered"].values()))
