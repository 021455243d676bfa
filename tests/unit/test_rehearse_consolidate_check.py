"""The consolidation rehearsal's report when the run left an old server unmoved: its shards are
still served (and checked) on the old server, and its instance, never seeded, is not read."""

from __future__ import annotations

from types import SimpleNamespace

from dbmigrate.rehearsal import consolidate as rehearsal


class FakeServerConn:
    def __init__(self, addr: str, touched: list[str], unseeded: set[str]):
        self.addr = addr
        if addr in unseeded:
            raise AssertionError(f"the report read {addr}, an instance that was never seeded")
        touched.append(addr)

    def close(self) -> None:
        pass


class FakeInspector:
    def __init__(self, server):
        self.addr = server.addr

    def named_replica_status(self, conn):
        return SimpleNamespace(running=True)

    def binlog_coordinates(self):
        return "bin.000001", 4

    def wait_for_position(self, conn, f, pos, timeout):
        return True

    def read_only(self):
        return True

    def table_checksums(self, schema):
        return {"seq": 1}


class FakeRoute:
    def __init__(self, shard, routes):
        self.shard = shard

    def current(self):
        return SimpleNamespace(writer=ROUTES[self.shard])


class FakeWriter:
    def __init__(self, ids):
        self.acks = [(i, "a", float(i)) for i in ids]

    def acked_on(self, address):
        return 0

    def longest_gap_ms(self):
        return 1.0

    errors: dict = {}


# old1 was cut over to inst1; old2's cutover failed: it still serves shard_2a, inst2 was never seeded.
ROUTES = {"shard_1a": "127.0.0.1:4001", "shard_2a": "127.0.0.1:3002"}
OLD = {"old1": "127.0.0.1:3001", "old2": "127.0.0.1:3002"}


def test_a_server_left_unmoved_is_checked_on_itself_and_its_instance_is_not_read(monkeypatch):
    touched: list[str] = []
    monkeypatch.setattr(rehearsal, "Server",
                        lambda addr, host, port, creds: FakeServerConn(addr, touched, {"127.0.0.1:4002"}))
    monkeypatch.setattr(rehearsal, "Inspector", FakeInspector)
    monkeypatch.setattr(rehearsal, "DsnFileRouter", FakeRoute)
    monkeypatch.setattr(rehearsal, "ids_on", lambda server, shard: {1, 2, 3})
    monkeypatch.setattr(rehearsal, "_address", lambda inv, old: OLD[old])
    inv = SimpleNamespace(defaults=SimpleNamespace(credentials=SimpleNamespace(resolve=lambda base: None)), base=None)
    placed = SimpleNamespace(instances=[SimpleNamespace(name="inst1", shards=["shard_1a"], host="h1", port=4001),
                                        SimpleNamespace(name="inst2", shards=["shard_2a"], host="h2", port=4002)])
    new_addr = {"inst1": "127.0.0.1:4001", "inst2": "127.0.0.1:4002"}
    writers = {"shard_1a": FakeWriter([1, 2, 3]), "shard_2a": FakeWriter([1, 2, 3])}

    report = rehearsal._check(inv, "c", placed, new_addr, {"old1": ["shard_1a"], "old2": ["shard_2a"]}, writers,
                              None, None, cut={"old1"})

    assert "127.0.0.1:4002" not in touched
    assert report["shards"]["shard_2a"]["expected"] == OLD["old2"] and not report["shards"]["shard_2a"]["moved"]
    assert report["shards"]["shard_1a"]["expected"] == new_addr["inst1"] and report["shards"]["shard_1a"]["moved"]
    assert report["misrouted_shards"] == 0 and report["lost_writes"] == 0
    assert set(report["old_servers_replicating_back"]) == {"old1"}  # only a moved server replicates back


def test_the_rehearsals_old_servers_are_named_alike():
    from dbmigrate.rehearsal.consolidate import old_names

    assert old_names("r") == ["r-1", "r-2", "r-3", "r-4"]
