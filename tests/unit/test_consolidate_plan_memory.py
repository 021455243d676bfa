"""`consolidate plan` shows one memory figure per instance and per host: what the instance takes
once started (its planned buffer pool plus overhead), and their sum on the host."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from dbmigrate.cli import consolidate as cli_consolidate

PLAN = Path(__file__).resolve().parents[2] / "playbooks" / "consolidate-plan.example.json"


def test_instance_memory_is_its_buffer_pool_plus_overhead_and_hosts_sum_them(monkeypatch):
    doc = json.loads(PLAN.read_text())
    memory, host_memory = cli_consolidate.planned_memory(doc)
    for i in doc["instances"]:
        assert memory[i["name"]] >= i["buffer_pool_mb"] / 1024  # never less than its own pool
    for h in doc["hosts"]:
        assert abs(host_memory[h["name"]] - sum(memory[n] for n in h["instances"])) < 1e-9
        assert host_memory[h["name"]] <= h["usable"]["memory"] + 1e-9  # the pools were sized to fit

    shown = Console(record=True, width=250)
    monkeypatch.setattr(cli_consolidate, "console", shown)
    cli_consolidate.render(doc)
    text = shown.export_text()
    first = doc["instances"][0]
    assert f"{memory[first['name']]:.2f} GB" in text and str(first["buffer_pool_mb"]) in text
    host = doc["hosts"][0]
    assert f"{host_memory[host['name']]:.2f} GB / {host['usable']['memory']:.2f} GB" in text
