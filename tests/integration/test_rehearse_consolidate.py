"""`dbmigrate rehearse consolidate --remote`: the whole consolidation, each old server and each
target host behind its own sshd, under a writer on every shard: planned at free ports,
provisioned by the generated Ansible playbook over ssh (mariadbd started directly), seeded
physically with each instance stopped and started through the host layer. With `--shape`, the
fixture capture's schema is an eleventh shard on the first old server, its accounts with it, and
its classes are replayed by a pool that follows the DSN file when it opens a connection."""

from __future__ import annotations


from pathlib import Path

import pytest
from tests import jsonlines

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "shapes" / "ca-capture"

pytestmark = pytest.mark.integration


NAME = "consolkeep"


def _processes_naming(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and "pytest" not in cmd:
            found.append(f"{proc.name} {cmd.strip()[:200]}")
    return found


def test_rehearse_consolidate_remote_moves_every_shard_physically_and_loses_nothing(cli, tmp_path):
    from dbmigrate.rehearsal.sandbox.manager import Sandboxes
    from dbmigrate.rehearsal.sandbox.ports import port_in_use

    report = tmp_path / "consolidate.html"
    r = cli("rehearse", "consolidate", "--remote", "--shape", str(CAPTURE), "--scale", "0.02", "--json",
            "--keep", "--name", NAME, "--report", str(report), timeout=600)
    try:
        kept = Sandboxes().find(NAME)
    except Exception:
        kept = None
    try:
        assert r.returncode == 0, r.stderr[-3000:]
        rep = jsonlines.result(r.stdout)
        _check_rehearsal(rep)
        # Ansible's provisioning is never silent: a line per task (and one at least every 10 s).
        assert "… provisioning (" in r.stderr and "option group [mariadbd.NAME] of each instance" in r.stderr, \
            r.stderr[-2000:]
        # The same evidence as a promote's report: acknowledged and lost writes, the timeline.
        html = report.read_text()
        assert f'data-lost="0"' in html and "acknowledged writes: " in html and "Cutover timeline" in html
        assert "Acknowledged writes per 10 ms" in html and "not recorded" not in html.split("Replica lag")[0]
        # --keep: the sandbox is left as the run left it, and the output names what removes it.
        assert rep["remove_with"] == f"dbmigrate sandbox down {NAME}"
        ports = [i["planned_port"] for i in rep["instances"].values()]
        assert all(port_in_use(p) for p in ports), ports  # the provisioned instances still serve
    finally:
        if kept is not None:
            down = cli("sandbox", "down", NAME)
            assert down.returncode == 0, down.stderr
    # Removed whole: no process of the sandbox left (its servers, the provisioned instances and
    # every sshd, each named by its directory), and nothing listens at the instances' ports.
    assert kept is not None
    assert _processes_naming(str(kept.path)) == [] and _processes_naming(f"sandbox-ssh/{NAME}") == []
    assert not any(port_in_use(p) for p in ports), ports
    assert not kept.path.exists()


def _check_rehearsal(rep: dict) -> None:
    assert rep["ok"] and rep["remote"] and rep["run_status"] == "done", rep["summary"]
    # 4 old servers, 10 shards and the shape's, 2 hosts x 2 instances.
    assert len(rep["shards"]) == 11 and "ca" in rep["shards"] and len(rep["instances"]) == 4
    assert sorted(i["host"] for i in rep["instances"].values()) == ["h1", "h1", "h2", "h2"]
    # Created by ansible-playbook at the plan's ports, and used there by every later step.
    assert rep["provision"]["by"] == "ansible-playbook" and set(rep["provision"]["recap"]) == {"h1", "h2"}
    assert all(c["changed"] > 0 and c["failed"] == 0 for c in rep["provision"]["recap"].values())
    assert rep["ports_not_as_planned"] == []
    for name, inst in rep["instances"].items():
        assert inst["address"] == f"127.0.0.1:{inst['planned_port']}", (name, inst)
    assert len({i["planned_port"] for i in rep["instances"].values()}) == 4
    # Every instance seeded physically over ssh, from the backup's GTID, keeping only its shards,
    # restarted (through the host layer) at its planned address.
    assert len(rep["seeds"]) == 4
    for key, seed in rep["seeds"].items():
        assert seed["method"] == "physical" and seed["gtid"] and seed["bytes"] > 5_000_000, seed
        assert set(seed["dropped"]) >= {"app", "sbtest"}, seed
        assert seed["address"] == rep["instances"][key.split("<-")[0]]["address"], seed
    # Each old server journaled as cut over by the fleet; one then rolled back alone.
    rolled = rep["rolled_back_server"]
    assert rolled and {s: f["status"] for s, f in rep["fleet"].items()} == {s: "done" for s in rep["fleet"]}
    assert rep["fleet"][rolled]["stage"] == "rollback"
    assert all(f["stage"] == "cutover" for s, f in rep["fleet"].items() if s != rolled)
    # Every shard served where it should be, with every acknowledged write there, checksums equal.
    assert rep["lost_writes"] == 0 and rep["checksum_differences"] == 0 and rep["misrouted_shards"] == 0
    for sh, s in rep["shards"].items():
        assert s["served_by"] == s["expected"] and s["lost"] == 0, (sh, s)
        assert s["acked_on_new"] >= 20, (sh, s)  # the instance really took writes
        if s["old_server"] == rolled:
            assert s["served_by"] != rep["instances"][s["instance"]]["address"]
        else:
            assert s["served_by"] == rep["instances"][s["instance"]]["address"]
    assert rep["fenced_checksums_equal"]
    # `consolidate status` sees the same: moved shards served by their instance with the old server
    # replicating back, the rolled-back server's shards served by it; no problem anywhere.
    assert rep["status"]["problems"] == []
    for st in rep["status"]["shards"]:
        if st["old"] == rolled:
            assert st["served_by"] == "old server" and "as after a rollback" in st["stage"], st
        else:
            assert st["served_by"] == "new instance" and st["stage"].startswith("moved (old server replicating"), st
    # The moved old servers are fenced and replicate their shards back until decommission.
    back = rep["old_servers_replicating_back"]
    assert rolled not in back and len(back) == 3
    for old, b in back.items():
        assert b["read_only"] and all(v["running"] and v["caught_up"] for v in b["from"].values()), (old, b)
    # The shape's classes, replayed by its accounts' pools, served before and after without an error;
    # the application's pool opened connections where the DSN file named the shard's writer, old and new.
    assert len(rep["classes"]) == 7, rep["classes"]
    for c in rep["classes"]:
        assert c["before"]["ok"] > 0 and c["after"]["ok"] > 0 and c["before"]["errors"] == c["after"]["errors"] == 0, c
    ca = rep["shards"]["ca"]
    # One pool per account and database, as the application's were ("ca_app@ca").
    opened = {a: n for key, pool in rep["shape"]["pools"].items() if key.split("@")[0] == "ca_app"
              for a, n in pool["opened_to"].items()}
    assert ca["moved"] and ca["served_by"] in opened and len(opened) >= 2, (opened, ca)  # the old server, then the instance
