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


def add_blob_table(server, shard: str, mb: int, row_kb: int = 64) -> int:
    """A MEDIUMBLOB table `docs` of about `mb` MB in `shard`, generated fast: one row, then
    INSERT ... SELECT doubling, kept out of the binlog (a seed copies it; replication has nothing
    to carry). Returns its rows."""
    server.execute("SET SESSION sql_log_bin=0")
    try:
        server.execute(f"CREATE TABLE {shard}.docs (id INT PRIMARY KEY AUTO_INCREMENT, body MEDIUMBLOB NOT NULL, "
                       "label VARCHAR(40) CHARACTER SET latin1)")
        server.execute(f"INSERT INTO {shard}.docs (body, label) VALUES (REPEAT(RANDOM_BYTES(1024), {row_kb}), 'x')")
        rows, n = mb * 1024 // row_kb, 1
        while n < rows:
            step = min(n, rows - n)
            server.execute(f"INSERT INTO {shard}.docs (body, label) SELECT body, label FROM {shard}.docs LIMIT {step}")
            n += step
        server.execute(f"ANALYZE TABLE {shard}.docs")
    finally:
        server.execute("SET SESSION sql_log_bin=1")
    return rows
