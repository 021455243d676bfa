"""Malformed inventories: each gets one clear message naming file, line and field."""

from __future__ import annotations

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.exceptions import ConfigError

GOOD_SERVER = "{host: 127.0.0.1, port: 3306}"
CREDS = "defaults:\n  credentials: {defaults_file: c.cnf, group: client}\n"

CASES = [
    ("invalid yaml",
     CREDS + "clusters:\n  a:\n    servers:\n      s1: {host: 127.0.0.1, port: 3306\n",
     r"inv.yaml:\d+: YAML syntax error"),
    ("unknown key in server",
     CREDS + "clusters:\n  a:\n    servers:\n      s1: {host: h, port: 1, colour: red}\n",
     "inv.yaml:6: clusters.a.servers.s1.colour: unknown key 'colour'; valid keys: host, port"),
    ("unknown top-level key",
     CREDS + "clusterz: {}\n",
     "inv.yaml:3: clusterz: unknown key 'clusterz'; valid keys: version, defaults, clusters"),
    ("duplicate port",
     CREDS + "clusters:\n  a:\n    servers:\n      s1: {host: h, port: 3306}\n      s2:\n        host: h\n        port: 3306\n",
     "inv.yaml:9: clusters.a.servers.s2.port: duplicate port: h:3306 is also server 's1'"),
    ("missing credentials",
     "clusters:\n  a:\n    servers:\n      s1: " + GOOD_SERVER + "\n",
     "inv.yaml:4: clusters.a.servers.s1: missing credentials"),
    ("port out of range",
     CREDS + "clusters:\n  a:\n    servers:\n      s1: {host: h, port: 70000}\n",
     "inv.yaml:6: clusters.a.servers.s1.port: 70000 is not valid: input should be less than or equal to 65535"),
    ("port not a number",
     CREDS + "clusters:\n  a:\n    servers:\n      s1:\n        host: h\n        port: three\n",
     "inv.yaml:8: clusters.a.servers.s1.port: 'three' is not valid: input should be a valid integer"),
    ("bad role",
     CREDS + "clusters:\n  a:\n    servers:\n      s1: {host: h, port: 1, role: boss}\n",
     "inv.yaml:6: clusters.a.servers.s1.role: 'boss' is not valid; expected one of primary, replica, candidate, standby"),
    ("missing host",
     CREDS + "clusters:\n  a:\n    servers:\n      s1: {port: 3306}\n",
     "inv.yaml:6: clusters.a.servers.s1.host: required key 'host' is missing"),
    ("empty cluster",
     CREDS + "clusters:\n  a:\n    servers: {}\n",
     "inv.yaml:5: clusters.a.servers: a cluster needs at least one server"),
    ("duplicate yaml key",
     CREDS + "clusters:\n  a:\n    servers:\n      s1: {host: h, port: 1}\n      s1: {host: h, port: 2}\n",
     "inv.yaml:7: clusters.a.servers.s1: duplicate key 's1' (first defined on line 6)"),
    ("credentials without source",
     "defaults:\n  credentials: {user: bob}\nclusters:\n  a:\n    servers:\n      s1: {host: h, port: 1}\n",
     "inv.yaml:2: defaults.credentials: needs defaults_file (and group) or password_env"),
    ("unknown router kind",
     CREDS + "clusters:\n  a:\n    router: {kind: f5}\n    servers:\n      s1: {host: h, port: 1}\n",
     "inv.yaml:5: clusters.a.router"),
    ("not a mapping",
     "- just\n- a list\n",
     "inv.yaml:1: an inventory is a mapping with 'clusters:'"),
    ("server name reused across clusters",
     CREDS + "clusters:\n  a:\n    servers:\n      s1: {host: h, port: 1}\n  b:\n    servers:\n      s1: {host: h, port: 2}\n",
     "inv.yaml:9: clusters.b.servers.s1: server name also used in cluster 'a'"),
    ("host with spaces",
     CREDS + "clusters:\n  a:\n    servers:\n      s1: {host: 'my host', port: 1}\n",
     "inv.yaml:6: clusters.a.servers.s1.host: 'my host' is not valid: host is not a host name or IP address"),
]


@pytest.mark.parametrize("name,text,expected", CASES, ids=[c[0] for c in CASES])
def test_malformed_inventory(name, text, expected):
    import re

    with pytest.raises(ConfigError) as ei:
        load_inventory("inv.yaml", text)
    msg = ei.value.message
    if expected.startswith("inv.yaml:\\d"):
        assert re.match(expected, msg), msg
    else:
        assert expected in msg, msg
    assert ei.value.exit_code == 2
    assert ei.value.hint  # every error says what to do


def test_good_inventory_resolves_credentials(tmp_path):
    (tmp_path / "c.cnf").write_text("[client]\nuser=admin\npassword=\"s3cr3t pw\"\n")
    inv_path = tmp_path / "inv.yaml"
    inv_path.write_text(CREDS + "clusters:\n  a:\n    servers:\n      s1: {host: 127.0.0.1, port: 3306, shards: [s_1, s_2]}\n")
    inv = load_inventory(inv_path)
    creds = inv.credentials_for(inv.cluster("a").servers["s1"])
    assert creds.user == "admin" and creds.password == "s3cr3t pw"
    assert "s3cr3t" not in repr(creds)
    assert inv.cluster("a").servers["s1"].shards == ["s_1", "s_2"]
    assert inv.find_server("127.0.0.1:3306")[0] == "a"


def test_unknown_server_lists_known(tmp_path):
    inv = load_inventory("inv.yaml", CREDS + "clusters:\n  a:\n    servers:\n      s1: {host: h, port: 1}\n")
    with pytest.raises(Exception) as ei:
        inv.find_server("nope")
    assert "unknown server 'nope'" in str(ei.value) and "s1" in ei.value.hint


ROUTER = ("clusters:\n  a:\n    servers:\n      s1: {host: h, port: 1}\n"
          "    router: {kind: haproxy, admin_socket: /run/h.sock, %s: %s}\n")


@pytest.mark.parametrize("key", ["writer_port", "reader_port"])
@pytest.mark.parametrize("value", ["-1", "0", "70000", "1e20", "1.0e+20", "'3306'", "3306.0", "true"])
def test_router_port_out_of_range_refused(key, value):
    with pytest.raises(ConfigError) as ei:
        load_inventory("inv.yaml", CREDS + ROUTER % (key, value))
    assert f"clusters.a.router.haproxy.{key}" in ei.value.message or f"clusters.a.router.{key}" in ei.value.message, \
        ei.value.message
    assert ei.value.exit_code == 2


def test_router_port_in_range_accepted():
    inv = load_inventory("inv.yaml", CREDS + ROUTER % ("writer_port", "65535"))
    assert inv.cluster("a").router.writer_port == 65535
