"""Old shard servers for consolidation tests: shards with data, an inventory that names them,
and DSN routes that send each shard's writes to its old server (what applications use today)."""

from __future__ import annotations

from typing import Any

import yaml

from dbmigrate.config import load_inventory
from dbmigrate.routing.dsn_file import DsnFileRouter


def legacy_shards(boxes, name: str, old: dict[str, list[str]], rows: int, **doc_extra: Any):
    """Start the old servers (the first is the sandbox's primary, the others standalone), fill
    each shard, and write legacy.yaml; returns (sandbox state, inventory, routes file)."""
    first, *others = old
    boxes.up(name, 0)
    for server in others:
        boxes.add_instance(name, server, cluster=name)
    state = boxes.find(name)
    base = load_inventory(state.inventory_file)
    for server, shards in old.items():
        with base.open(server) as s:
            for sh in shards:
                s.execute(f"CREATE DATABASE {sh}")
                s.execute(f"CREATE TABLE {sh}.items (id INT PRIMARY KEY AUTO_INCREMENT, name VARCHAR(40), qty INT)")
                s.execute(f"INSERT INTO {sh}.items (name, qty) VALUES " +
                          ",".join(f"('{sh}-item{i}', {i})" for i in range(rows)))
                s.execute(f"CREATE TABLE {sh}.seq (id BIGINT PRIMARY KEY, ts DATETIME(6) NOT NULL)")
            s.execute("GRANT ALL PRIVILEGES ON `shard\\_%`.* TO dbm_app@'%'")
    doc = yaml.safe_load(state.inventory_file.read_text())
    cluster = doc["clusters"][name]
    for server, shards in old.items():
        cluster["servers"][server]["shards"] = shards
    cluster["router"] = {"kind": "dsn-file", "path": "shards.json"}
    doc["planning"] = {"reserved_memory_gb": 0.25, "instance_overhead_mb": 64, "min_buffer_pool_mb": 32}
    doc.update(doc_extra)
    inv_path = state.path / "legacy.yaml"
    inv_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    inv = load_inventory(inv_path)
    routes = state.path / "shards.json"
    for server, shards in old.items():
        spec = inv.cluster(name).servers[server]
        for sh in shards:
            DsnFileRouter(sh, routes).switch_writer(f"{spec.host}:{spec.port}")
    return state, inv, routes
