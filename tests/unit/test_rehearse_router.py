"""Where a rehearsal's applications write and read for each router kind, and `--router` checked
before anything is built."""

from __future__ import annotations

import pytest

from dbmigrate.config import ClusterSpec
from dbmigrate.exceptions import UsageError
from dbmigrate.rehearsal.rehearse import check_router

SERVERS = {"s1": {"host": "127.0.0.1", "port": 3306}}


def cluster(router: dict | None) -> ClusterSpec:
    return ClusterSpec.model_validate({"servers": SERVERS, **({"router": router} if router else {})})


def test_the_relay_is_where_the_applications_write_and_read():
    c = cluster({"kind": "relay", "address": "127.0.0.1:4406", "control_socket": "/x/control.sock"})
    assert c.write_address() == ("127.0.0.1", 4406)
    assert c.read_address() == ("127.0.0.1", 4406)  # writes only: reads go where the writes go


def test_haproxy_writes_to_its_writer_port_and_reads_from_its_reader_port():
    c = cluster({"kind": "haproxy", "admin_socket": "/x/admin.sock", "writer_port": 3310, "reader_port": 3311,
                 "address": "127.0.0.9"})
    assert c.write_address() == ("127.0.0.9", 3310)
    assert c.read_address() == ("127.0.0.9", 3311)
    no_readers = cluster({"kind": "haproxy", "admin_socket": "/x/admin.sock", "writer_port": 3310})
    assert no_readers.read_address() == ("127.0.0.1", 3310)


def test_a_router_without_an_address_gives_none():
    assert cluster({"kind": "dsn-file", "path": "dsn.json"}).write_address() is None
    assert cluster(None).read_address() is None


def test_an_unknown_router_or_the_relay_with_compose_is_refused_before_anything_is_built(monkeypatch):
    from dbmigrate.rehearsal.sandbox import relay

    monkeypatch.setattr(relay, "relay_binary", lambda: pytest.fail("nothing is built for a refused router"))
    with pytest.raises(UsageError, match="one of haproxy, relay"):
        check_router("envoy", compose=False)
    with pytest.raises(UsageError, match="compose topology routes through its HAProxy"):
        check_router("relay", compose=True)
    check_router("haproxy", compose=True)


def test_the_relay_is_built_before_any_server_starts(monkeypatch):
    from dbmigrate.exceptions import SandboxError
    from dbmigrate.rehearsal.sandbox import relay

    def no_go():
        raise SandboxError("go is not installed: the relay (relay/, a Go program) cannot be built")

    monkeypatch.setattr(relay, "relay_binary", no_go)
    with pytest.raises(SandboxError, match="go is not installed"):
        check_router("relay", compose=False)
