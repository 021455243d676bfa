"""docker-compose.yml, HAProxy's configuration and the shipped compose inventory describe the
same servers: one loopback address per server, all on one port, HAProxy on an address of its own.

The servers themselves run in tests/integration/test_compose_rehearsals.py."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from dbmigrate.config import load_inventory
from dbmigrate.playbook import load_playbook

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = re.compile(r"\$\{(\w+):-([^}]+)\}")


def _compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _defaults(text: str) -> str:
    """A compose value with its variables at their defaults."""
    return DEFAULT.sub(lambda m: m.group(2), text)


def _flags(svc) -> dict[str, str]:
    return dict((_defaults(f).lstrip("-").split("=", 1) + [""])[:2] for f in svc["command"])


def test_compose_servers_match_the_inventory():
    services = {n: s for n, s in _compose()["services"].items() if n != "haproxy" and "profiles" not in s}
    inv = load_inventory(ROOT / "playbooks/compose/inventory.yaml")
    servers = inv.cluster("compose").servers
    assert set(services) == set(servers)
    for name, svc in services.items():
        flags = _flags(svc)
        assert flags["report-port"] == flags["port"] == str(servers[name].port)
        assert flags["bind-address"] == flags["report-host"] == servers[name].host
        for needed in ("log-bin", "binlog-format", "log-slave-updates", "gtid-strict-mode", "server-id", "read-only"):
            assert needed in flags, (name, needed)
        assert svc["network_mode"] == "host"
        assert servers[name].access.kind == "docker"
    assert len({_flags(s)["server-id"] for s in services.values()}) == len(services)
    assert len({_flags(s)["bind-address"] for s in services.values()}) == len(services)  # a host each


def test_images_default_to_the_official_ones():
    services = _compose()["services"]
    assert _defaults(services["db1"]["image"]) == "mariadb:10.11"
    assert _defaults(services["haproxy"]["image"]) == "haproxy:2.6"
    assert services["db1"]["healthcheck"]["test"][1] == "healthcheck.sh"  # the official image's script


def test_every_image_is_a_variable_whose_default_is_the_official_image():
    """Where a registry is reachable the same file runs the official images; here the rehearsal
    passes the names of the images it built in these variables."""
    for name, svc in _compose()["services"].items():
        var, default = DEFAULT.fullmatch(svc["image"]).groups()
        expected = ("DBMIGRATE_HAPROXY_IMAGE", "haproxy:2.6") if name == "haproxy" else \
            ("DBMIGRATE_MARIADB_IMAGE", "mariadb:10.11")
        assert (var, default) == expected, name


def test_the_servers_keep_the_official_mariadb_images_conventions():
    """The official image's contract: root's password from MARIADB_ROOT_PASSWORD (and its host from
    MARIADB_ROOT_HOST), flags as the command, `healthcheck.sh --connect --innodb_initialized`;
    the image built from Debian's packages honours the same contract."""
    servers = {n: s for n, s in _compose()["services"].items() if "healthcheck" in s}
    assert set(servers) == {"db1", "db2", "db3", "db4"}
    for name, svc in servers.items():
        env = svc["environment"]
        assert env["MARIADB_ROOT_PASSWORD"].startswith("${DBMIGRATE_ROOT_PASSWORD"), name
        assert "MARIADB_ROOT_HOST" in env
        assert svc["healthcheck"]["test"] == ["CMD", "healthcheck.sh", "--connect", "--innodb_initialized"]
        assert all(str(flag).startswith("--") for flag in svc["command"]), name  # flags only: the entrypoint adds mariadbd
    ours = ROOT / "compose/mariadb"
    dockerfile = (ours / "Dockerfile").read_text()
    assert "COPY docker-entrypoint.sh healthcheck.sh /usr/local/bin/" in dockerfile
    entrypoint = (ours / "docker-entrypoint.sh").read_text()
    assert "MARIADB_ROOT_PASSWORD" in entrypoint and "MARIADB_ROOT_HOST" in entrypoint
    assert 'set -- mariadbd "$@"' in entrypoint  # flags as the command, as the official entrypoint


def test_haproxy_is_configured_where_the_official_image_reads_it():
    hap = _compose()["services"]["haproxy"]
    assert "./compose/haproxy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in hap["volumes"]
    assert "/usr/local/etc/haproxy/haproxy.cfg" in (ROOT / "compose/haproxy/Dockerfile").read_text()


def test_the_consolidation_hosts_start_only_when_asked():
    """h1 and h2 are in the `consolidate` profile: a plain `docker compose up` starts the promote topology."""
    services = _compose()["services"]
    hosts = {n: s for n, s in services.items() if "profiles" in s}
    assert set(hosts) == {"h1", "h2"}
    for svc in hosts.values():
        assert svc["profiles"] == ["consolidate"] and svc["network_mode"] == "host" and svc["init"] is True


def test_haproxy_config_matches_the_inventory():
    cfg = (ROOT / "compose/haproxy/haproxy.cfg").read_text()
    env = _compose()["services"]["haproxy"]["environment"]
    addr = {k: _defaults(v) for k, v in env.items()}
    cfg = re.sub(r"\$\{(\w+)\}", lambda m: addr[m.group(1)], cfg).replace('"', "")
    inv = load_inventory(ROOT / "playbooks/compose/inventory.yaml")
    router = inv.cluster("compose").router
    assert f"bind {router.address}:{router.writer_port}" in cfg and f"bind {router.address}:{router.reader_port}" in cfg
    writer = cfg.split("\nbackend writer")[1].split("\nbackend")[0]
    found = set(re.findall(r"server \w+ ([\d.]+:\d+)", writer))
    assert found == {f"{s.host}:{s.port}" for s in inv.cluster("compose").servers.values()}
    assert "/run/haproxy/admin.sock" in cfg and router.admin_socket.endswith("compose/run/admin.sock")


def test_compose_playbook_plans():
    pb = load_playbook(ROOT / "playbooks/compose/promote.yaml")
    assert pb.procedure == "promote" and pb.params.candidate == "db4"
