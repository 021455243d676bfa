"""The docker compose rehearsal topology and its inventory describe the same servers.

No Docker engine runs where these tests run, so this checks the files against each
other; the servers themselves are exercised through the local sandbox."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from dbmigrate.config import load_inventory
from dbmigrate.playbook import load_playbook

ROOT = Path(__file__).resolve().parents[2]


def _compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_servers_match_the_inventory():
    services = _compose()["services"]
    ports = {}
    for name, svc in services.items():
        if name == "haproxy":
            continue
        flags = dict((f.lstrip("-").split("=", 1) + [""])[:2] for f in svc["command"])
        ports[int(flags["port"])] = flags
        assert flags["report-port"] == flags["port"]
        for needed in ("log-bin", "binlog-format", "log-slave-updates", "gtid-strict-mode", "server-id", "read-only"):
            assert needed in flags, (name, needed)
        assert svc["network_mode"] == "host"
    assert len({f["server-id"] for f in ports.values()}) == len(ports)  # unique server ids
    inv = load_inventory(ROOT / "playbooks/compose/inventory.yaml")
    assert {s.port for s in inv.cluster("compose").servers.values()} == set(ports)


def test_haproxy_config_matches_the_inventory():
    cfg = (ROOT / "compose/haproxy.cfg").read_text()
    inv = load_inventory(ROOT / "playbooks/compose/inventory.yaml")
    router = inv.cluster("compose").router
    assert f"127.0.0.1:{router.writer_port}" in cfg and f"127.0.0.1:{router.reader_port}" in cfg
    writer_servers = re.findall(r"server \w+ 127\.0\.0\.1:(\d+)", cfg.split("\nbackend writer")[1].split("\nbackend")[0])
    assert {int(p) for p in writer_servers} == {s.port for s in inv.cluster("compose").servers.values()}
    assert "/run/haproxy/admin.sock" in cfg and router.admin_socket.endswith("compose/run/admin.sock")


def test_compose_playbook_plans():
    pb = load_playbook(ROOT / "playbooks/compose/promote.yaml")
    assert pb.procedure == "promote" and pb.params.candidate == "db4"
