"""`consolidate status`: the verdict per shard from probes and the route (pure)."""

from __future__ import annotations

from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.procedures.consolidate.status import Probe, shard_status

OLD, NEW = "10.0.0.1:3306", "10.0.1.7:3306"


def conn(running=True, behind=0, error=""):
    return ReplicaStatus("h", 3306, "Yes" if running else "No", "Yes" if running else "No", behind, error, "", "No")


def probes(old_ro=False, new_ro=True, seeded=True, forward=None, back=None, new_up=True):
    old = Probe("old-a", OLD, read_only=old_ro, schemas={"s1"}, connections={"h7_1": back} if back else {})
    new = Probe("h7-1", NEW, read_only=new_ro, schemas={"s1"} if seeded else set(),
                connections={"old_a": forward} if forward else {})
    if not new_up:
        new = Probe("h7-1", NEW, error="connection refused")
    return old, new


def test_each_stage_of_a_move_is_named_with_who_serves_the_shard():
    s = shard_status("s1", *probes(new_up=False), OLD, "old_a")
    assert (s.served_by, s.stage, s.problems) == ("old server", "not provisioned", [])
    s = shard_status("s1", *probes(seeded=False), OLD, "old_a")
    assert s.stage == "provisioned, not seeded"
    s = shard_status("s1", *probes(forward=conn(behind=3)), OLD, "old_a")
    assert (s.served_by, s.stage) == ("old server", "seeded, replicating, 3s behind")
    s = shard_status("s1", *probes(old_ro=True, new_ro=False, back=conn()), NEW, "old_a")
    assert (s.served_by, s.stage, s.problems) == ("new instance", "moved (old server replicating, 0s behind from it)", [])
    s = shard_status("s1", *probes(old_ro=False, new_ro=True, back=conn()), OLD, "old_a")
    assert s.served_by == "old server" and s.stage.startswith("back on the old server")
    # After a rollback: the old server writable and routed, the instance fenced, no connection either way.
    s = shard_status("s1", *probes(old_ro=False, new_ro=True), OLD, "old_a")
    assert (s.served_by, s.problems) == ("old server", [])
    assert s.stage == "on the old server; the instance's copy is not replicating (as after a rollback)"


def test_problems_are_named():
    s = shard_status("s1", *probes(old_ro=False, new_ro=False, forward=conn()), OLD, "old_a")
    assert "both old-a and h7-1 are writable" in s.problems
    s = shard_status("s1", *probes(old_ro=True, forward=conn()), OLD, "old_a")
    assert "routed to old-a, which is read-only (fenced)" in s.problems
    s = shard_status("s1", *probes(forward=conn(running=False, error="Error 1062")), OLD, "old_a")
    assert s.stage == "seeded, replication stopped" and "replication stopped: Error 1062" in s.problems
    s = shard_status("s1", *probes(), "10.9.9.9:3306", "old_a")
    assert s.served_by == "elsewhere: 10.9.9.9:3306" and s.problems


def test_without_a_route_the_only_writable_side_serves():
    assert shard_status("s1", *probes(old_ro=True, new_ro=False), None, "old_a").served_by == "new instance"
    assert shard_status("s1", *probes(old_ro=False, new_ro=True), None, "old_a").served_by == "old server"
    assert shard_status("s1", *probes(old_ro=True, new_ro=True), None, "old_a").served_by == "unknown (no route)"
