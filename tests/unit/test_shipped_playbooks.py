"""The playbooks shipped in playbooks/ load, validate and plan without any server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dbmigrate.app.runs import plan_playbook
from dbmigrate.config import load_inventory
from dbmigrate.playbook import load_playbook

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p for p in (ROOT / "playbooks").glob("*.yaml") if not p.name.startswith("inventory"))


def test_playbooks_are_shipped():
    assert "promote-replica.yaml" in [p.name for p in SHIPPED]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_playbook_loads_and_plans(path):
    playbook = load_playbook(path)
    procedure = plan_playbook(path)
    assert procedure.name == playbook.procedure
    assert [s.name for _, _, s in procedure.steps()], "a plan with no steps"
    # Its inventory ships too, names the cluster, and the playbook's servers are in it.
    assert playbook.inventory_path is not None and playbook.inventory_path.exists()
    inv = load_inventory(playbook.inventory_path)
    cluster = inv.cluster(playbook.cluster)
    candidate = getattr(playbook.params, "candidate", None)
    if candidate is not None:
        assert candidate in cluster.servers


def test_promote_replica_playbook_is_what_the_comments_say():
    playbook = load_playbook(ROOT / "playbooks" / "promote-replica.yaml")
    procedure = plan_playbook(playbook.path)
    assert [p.name for p in procedure.phases] == ["preflight", "prepare", "cutover", "verify", "guard"]
    # the manual go-ahead sits before the cutover, after the automatic preflight
    assert ("go-ahead", "manual") in [(g.name, g.kind) for g in procedure.phase("cutover").gates]
    assert [g.name for g in procedure.phase("preflight").gates] == ["preflight"]
    cutover = [s.name for s in procedure.phase("cutover").steps]
    assert cutover[0].startswith("fence ") and cutover[-1].startswith("reverse replication ")
    # a complete template: the warm-up and its gate, the latency guard (hooks are commented out)
    assert playbook.params.warm is not None and playbook.params.warm.method == "dump-load"
    assert [g.name for g in procedure.phase("cutover").gates] == ["warm-up", "go-ahead"]
    assert playbook.spec.guard is not None and playbook.spec.guard.rules
    assert [p.name for p in procedure.phases][-1] == "guard"
    assert not any(getattr(playbook.spec.hooks, k) for k in ("before_phase", "after_phase", "on_success", "on_failure"))


def test_example_inventory_keeps_secrets_out():
    inv = load_inventory(ROOT / "playbooks" / "inventory.example.yaml")
    assert inv.defaults.credentials.defaults_file and inv.defaults.credentials.group
    orders = inv.cluster("orders")
    assert orders.replication_credentials.password_env and orders.app_credentials.password_env
    keys = set(_keys(yaml.safe_load((ROOT / "playbooks" / "inventory.example.yaml").read_text())))
    assert "password" not in keys and "password_env" in keys


def _keys(node):
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _keys(value)
    elif isinstance(node, list):
        for item in node:
            yield from _keys(item)


def test_plan_command_needs_no_server():
    r = subprocess.run([sys.executable, "-m", "dbmigrate", "plan", "playbooks/promote-replica.yaml"],
                       capture_output=True, text=True, cwd=str(ROOT), timeout=60, env=dict(os.environ, COLUMNS="200"))
    assert r.returncode == 0, r.stderr
    assert "go-ahead" in r.stdout and "fence" in r.stdout
