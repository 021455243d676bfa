"""Problem rules of discovery, on hand-built nodes (no server)."""

from __future__ import annotations

from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.topology.discovery import Cluster, Node, assess, normalize_address
from dbmigrate.topology.probe import ServerFacts
from dbmigrate.topology.render import cluster_tree, node_label
from rich.console import Console

V = "10.11.6-MariaDB-0+deb12u1"


def node(addr, source=None, ro=True, io="Yes", sql="Yes", state="", pos="0-1-10", fmt="ROW", lsu=True,
         filters=None, dump_threads=0, error=None) -> Node:
    f = ServerFacts(addr, addr, flavor="mariadb", version=V, read_only=ro, binlog_format=fmt, log_bin=True,
                    log_slave_updates=lsu, gtid_executed=pos, gtid_binlog_pos=pos, source=source,
                    io_running=io if source else None, sql_running=sql if source else None,
                    seconds_behind=0 if source else None, error=error)
    st = ReplicaStatus(*source.split(":"), io, sql, 0, "", "", "Slave_Pos", filters=filters or {}) if source else None
    return Node(addr, addr, f, status=st, gtid_state=state or pos, dump_threads=dump_threads)


def cluster(*nodes: Node) -> Cluster:
    return assess(Cluster("c", {n.address: n for n in nodes}))


P, R2, R3 = "h:1", "h:2", "h:3"


def test_healthy_cluster_has_roles_and_no_problems():
    c = cluster(node(P, ro=False, dump_threads=2), node(R2, P), node(R3, P))
    assert c.primary.address == P and [n.address for n in c.replicas] == [R2, R3]
    assert c.primary.replicas == [R2, R3]
    assert c.problems == []
    assert c.node(R2).behind == {"0": 0}


def test_chain_makes_an_intermediate():
    c = cluster(node(P, ro=False), node(R2, P), node(R3, R2))
    assert c.node(R2).role == "intermediate" and c.node(R3).role == "replica"
    assert c.node(R2).replicas == [R3]


def test_each_problem_rule_names_the_server():
    c = cluster(node(P, ro=False, pos="0-1-20", state="0-1-20", dump_threads=3),
                node(R2, P, sql="No", pos="0-1-15", fmt="MIXED", lsu=False, filters={"Replicate_Do_DB": "app"}),
                node(R3, P, ro=False, state="0-1-20,0-3-12", pos="0-3-12"))
    p2, p3 = c.node(R2).problems, c.node(R3).problems
    assert "replication stopped: io=Yes sql=No" in p2
    assert "log_slave_updates off" in p2 and "binlog_format not ROW (MIXED)" in p2
    assert "replication filters: Replicate_Do_DB=app" in p2
    assert c.node(R2).behind == {"0": 5}
    assert "writable replica" in p3 and "errant GTIDs: 0-3-12" in p3
    assert any("1 unregistered replica(s)" in p for p in c.node(P).problems)
    assert f"{R3}: errant GTIDs: 0-3-12" in c.problems


def test_two_writable_primaries_is_a_cluster_problem():
    c = cluster(node(P, ro=False), node(R2, ro=False))
    assert c.primary is None and len(c.primaries) == 2
    assert c.problems[0].startswith(f"2 separate replication trees each have a writable primary: {P}, {R2}")
    assert "list their schemas under `shards:`" in c.problems[0]


def test_independent_shard_servers_are_each_their_own_tree_not_a_problem():
    c = assess(Cluster("legacy", {n.address: n for n in (node(P, ro=False), node(R2, ro=False), node(R3, R2))},
                       shard_servers={P, R2}))
    assert c.problems == []
    assert c.notes == [f"2 shard server(s), each the writable primary of its own replication tree: {P}, {R2}"]
    assert c.node(R3).source == R2 and c.node(R2).replicas == [R3]
    # A third writable root that holds no shards is still a problem, named alone.
    c = assess(Cluster("legacy", {n.address: n for n in (node(P, ro=False), node(R2, ro=False), node(R3, ro=False))},
                       shard_servers={P}))
    assert c.problems[0].startswith(f"2 separate replication trees each have a writable primary: {R2}, {R3}")


def test_unreachable_server_and_orphan():
    c = cluster(node(P, ro=False), node(R2, P, error="cannot reach"), node(R3, "other:9"))
    assert c.node(R2).role == "unreachable" and c.node(R2).problems == ["unreachable: cannot reach"]
    assert c.node(R3).role == "orphan"


def test_address_normalisation_and_lookup_by_name():
    assert normalize_address("localhost", "3306") == "127.0.0.1:3306"
    c = cluster(node(P, ro=False), node(R2, P))
    c.node(R2).name = "db-2"
    assert c.node("db-2").address == R2


def test_tree_draws_replicas_under_their_source_with_problems():
    c = cluster(node(P, ro=False), node(R2, P), node(R3, R2, sql="No"))
    con = Console(width=200, record=True)
    con.print(cluster_tree(c))
    text = con.export_text()
    lines = text.splitlines()
    assert "h:1 [primary, -, 10.11.6-MariaDB, rw, GTID, ROW]" in lines[1]
    assert "h:2 [intermediate, 0s, 10.11.6-MariaDB, ro, Slave_Pos, ROW]" in lines[2]
    assert "h:3 [replica" in lines[3] and "replication stopped" in lines[3]
    assert lines[3].index("h:3") > lines[2].index("h:2")  # deeper indentation
    assert node_label(c.node(R3), markup=False).startswith("h:3 [replica, 0s")
