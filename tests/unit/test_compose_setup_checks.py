"""Checks a compose rehearsal makes before it starts anything: which engine, which addresses,
which Compose. Each refusal is one line with what to do, and nothing is started."""

from __future__ import annotations

import socket

import pytest

from dbmigrate.exceptions import SandboxError, UsageError
from dbmigrate.rehearsal.compose import engine as eng
from dbmigrate.rehearsal.compose import topology as topo


def test_addresses_are_one_per_server_on_one_prefix_and_free():
    a = topo.pick_addresses(topo.SERVICES)
    assert set(a) == {*topo.SERVICES, *topo.HOSTS, "haproxy"}
    prefixes = {addr.rsplit(".", 1)[0] for addr in a.values()}
    assert len(prefixes) == 1 and next(iter(prefixes)).startswith("127.")
    assert len(set(a.values())) == len(a)
    assert all(topo.bindable(addr, topo.SERVER_PORT) for addr in a.values())


def test_a_taken_address_is_refused_and_named(monkeypatch):
    monkeypatch.setenv(topo.PREFIX_ENV, "127.61.77")
    with socket.socket() as s:
        s.bind(("127.61.77.12", topo.SERVER_PORT))
        s.listen()
        with pytest.raises(SandboxError) as e:
            topo.pick_addresses(topo.SERVICES)
    assert "127.61.77.12:3306" in e.value.message and "already taken" in e.value.message
    assert topo.PREFIX_ENV in e.value.hint


def test_a_free_forced_prefix_is_used_as_given(monkeypatch):
    monkeypatch.setenv(topo.PREFIX_ENV, "127.61.78")
    a = topo.pick_addresses(("db1", "db2"))
    assert a == {"db1": "127.61.78.11", "db2": "127.61.78.12", "h1": "127.61.78.21", "h2": "127.61.78.22",
                 "haproxy": "127.61.78.10"}


def test_a_taken_port_of_a_target_host_is_refused_and_named(monkeypatch):
    """A consolidation's target host gets instances at 3306 and 3307 on its address: both must be free."""
    monkeypatch.setenv(topo.PREFIX_ENV, "127.61.79")
    with socket.socket() as s:
        s.bind(("127.61.79.22", 3307))
        s.listen()
        with pytest.raises(SandboxError) as e:
            topo.pick_addresses(topo.SERVICES)
    assert e.value.message == "127.61.79.22:3307 is already taken by another process"


@pytest.mark.parametrize("bad", ["10.0.0", "127.1", "127.300.1", "127.a.b"])
def test_a_bad_prefix_is_a_usage_error(monkeypatch, bad):
    monkeypatch.setenv(topo.PREFIX_ENV, bad)
    with pytest.raises(UsageError):
        topo.pick_addresses(topo.SERVICES)


def test_docker_host_that_does_not_answer_is_not_replaced(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    monkeypatch.setattr(eng, "SYSTEM_SOCKET", f"unix://{tmp_path}/nothing-either.sock")
    with pytest.raises(SandboxError) as e:
        eng.acquire()
    assert "DOCKER_HOST" in e.value.message and "unset DOCKER_HOST" in e.value.hint


def test_without_an_engine_only_root_may_start_one(monkeypatch, tmp_path):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(eng, "SYSTEM_SOCKET", f"unix://{tmp_path}/nothing.sock")
    monkeypatch.setattr(eng.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("DBMIGRATE_HOME", str(tmp_path / "home"))
    with pytest.raises(SandboxError) as e:
        eng.acquire()
    assert "only root may start one" in e.value.message and e.value.hint
    assert not (tmp_path / "home" / "docker" / "data").exists()  # nothing made


def test_an_engine_of_another_run_on_the_same_data_root_is_refused(monkeypatch, tmp_path):
    import json
    import subprocess
    import sys

    monkeypatch.setenv("DBMIGRATE_HOME", str(tmp_path))
    data = tmp_path / "docker" / "data"
    data.mkdir(parents=True)
    # A live process naming the data-root stands in for the other run's dockerd.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", str(data)])
    try:
        (tmp_path / "docker" / "engine.json").write_text(json.dumps({"pid": other.pid, "address": "unix:///x.sock",
                                                                     "data_root": str(data)}))
        with pytest.raises(SandboxError) as e:
            eng._refuse_if_in_use(data)
        assert str(other.pid) in e.value.message and "DOCKER_HOST=unix:///x.sock" in e.value.hint
    finally:
        other.kill()
        other.wait()
    eng._refuse_if_in_use(data)  # a dead engine's record is stale: removed, no error
    assert not (tmp_path / "docker" / "engine.json").exists()


def test_compose_override_is_tried_alone(monkeypatch):
    from dbmigrate.rehearsal.compose import cli

    monkeypatch.setenv("DBMIGRATE_COMPOSE", "/opt/compose/bin/docker-compose --ansi never")
    assert cli._candidates() == [["/opt/compose/bin/docker-compose", "--ansi", "never"]]


def test_kept_topologies_are_named_with_how_to_remove_them(monkeypatch, tmp_path):
    monkeypatch.setenv("DBMIGRATE_HOME", str(tmp_path))
    d = tmp_path / "compose" / "old-one"
    d.mkdir(parents=True)
    topo.TopologyState(name="old-one", project="dbm-old-one", dir=str(d), engine_address="unix:///x",
                       engine_owned=True, compose=["docker-compose"], addresses={}, servers={}, primary="a",
                       keep=True).save()
    with pytest.raises(UsageError) as e:
        topo.refuse_kept()
    assert "old-one" in e.value.message and "dbmigrate rehearse down old-one" in e.value.hint
