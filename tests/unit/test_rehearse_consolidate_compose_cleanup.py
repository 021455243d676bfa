"""`rehearse consolidate --compose` removes its topology (containers, the instances in the host
containers with them, and an engine it started) whatever ends the run, unless --keep asked to
leave it; an error of the run is never hidden by the removal's. The whole run against real
containers is in tests/integration/test_compose_rehearsals.py."""

from __future__ import annotations

import pytest

from dbmigrate.exceptions import ConfigError
from dbmigrate.rehearsal import consolidate
from dbmigrate.rehearsal.compose import run as compose_run


class FakeComposeRun:
    made: list["FakeComposeRun"] = []

    def __init__(self, name, servers, *, progress=None, keep=False, hosts=(), standalone=False, router=True):
        self.name, self.servers, self.keep = name, servers, keep
        self.hosts, self.standalone, self.router = hosts, standalone, router
        self.downs = 0
        self.left: list[str] = []
        FakeComposeRun.made.append(self)

    def up(self):
        return self

    @property
    def inventory_file(self):
        return self.path / "inventory.yaml"  # never written: the run fails on reading it

    def down(self):
        self.downs += 1
        return list(self.left)


@pytest.fixture
def fake(monkeypatch, tmp_path):
    FakeComposeRun.made = []
    FakeComposeRun.path = tmp_path
    monkeypatch.setattr(compose_run, "ComposeRun", FakeComposeRun)
    return FakeComposeRun


def test_a_failure_after_up_removes_the_topology(fake):
    with pytest.raises(ConfigError):
        consolidate.rehearse_consolidate(compose=True, name="c1")
    (topo,) = fake.made
    assert topo.downs == 1
    # the old servers are 4 standalone primaries, the target hosts empty containers, no HAProxy
    assert list(topo.servers.values()) == ["db1", "db2", "db3", "db4"] and topo.hosts == ("h1", "h2")
    assert topo.standalone and not topo.router


def test_kept_topology_is_not_removed(fake):
    with pytest.raises(ConfigError):
        consolidate.rehearse_consolidate(compose=True, name="c2", keep=True)
    assert fake.made[0].downs == 0


def test_the_runs_own_error_is_not_hidden_by_leftovers(fake, monkeypatch):
    monkeypatch.setattr(FakeComposeRun, "down", lambda self: ["container dbm-c3-db1-1"])
    with pytest.raises(ConfigError):  # not the SandboxError about the leftover
        consolidate.rehearse_consolidate(compose=True, name="c3")

