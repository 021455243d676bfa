"""`dbmigrate rehearse promote --router relay`: the main job with the relay in front of the
sandbox. With `--regress` the guard rolls the cutover back by itself, so one rehearsal switches
the writer there and back through the relay's hold, under the three application pools
(server-side prepared statements, kept connections), the zero-loss writer, sysbench and the
read load, all writing through the relay. `rehearse consolidate --router relay` does the same for
a consolidation: a relay per shard, the fleet's cutover and a one-server rollback through them."""

from __future__ import annotations

import pytest

from tests import jsonlines

pytestmark = pytest.mark.integration

KINDS = ("go_pool", "hikari_pool", "naive_pool")


def needs_go() -> None:
    """The relay is built with Go: without it these rehearsals are skipped, saying why."""
    from dbmigrate.rehearsal.sandbox import relay

    try:
        relay.go_binary()
    except Exception as e:  # noqa: BLE001 - the reason is the skip's message
        pytest.skip(str(e))


def no_pool_saw_an_error(report: dict) -> None:
    for kind in KINDS:  # the point: through every switch there and back
        assert report["client_calls"][kind] > 0, report["client_calls"]
        assert report["client_errors"][kind] == 0, (kind, report["client_error_classes"])


def test_the_rehearsal_through_the_relay_ends_no_session_there_and_back(cli):
    needs_go()
    r = cli("rehearse", "promote", "--router", "relay", "--regress", "--json", "--load-seconds", "2", timeout=400)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[:3000]
    report = jsonlines.result(r.stdout)
    assert report["router"] == "relay"
    assert report["rolled_back"] is True and report["guard"]["rollback"] is True, report.get("guard_windows")
    assert report["lost_writes"] == 0 and report["acknowledged_writes"] > 0
    assert set(report["client_errors"]) == set(KINDS), report["client_errors"]
    no_pool_saw_an_error(report)
    assert report["reads"]["queries"] > 0 and report["reads"]["errors"] == 0, report["reads"]
    print(f"through the relay, promote and the guard's rollback: {report['acknowledged_writes']} acknowledged, "
          f"0 lost, calls {report['client_calls']}, longest call {report['client_stall_max_ms']} ms, "
          f"fenced window {report['fenced_ms']} ms, rollback {report['rollback_s']} s")


def test_the_schema_swap_rehearsal_through_the_relay_switches_there_and_back_with_no_error(cli):
    needs_go()
    r = cli("rehearse", "schema-swap", "--router", "relay", "--json", "--rows", "2000", timeout=400)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[:3000]
    report = jsonlines.result(r.stdout)
    assert report["router"] == "relay" and report["run_status"] == "done"
    assert report["primary_back"] is True and all(report["altered"].values()), report["altered"]
    assert report["lost_writes"] == 0 and report["acknowledged_writes"] > 0
    no_pool_saw_an_error(report)
    assert report["reads"]["queries"] > 0 and report["reads"]["errors"] == 0, report["reads"]
    print(f"schema swap through the relay, there and back: {report['acknowledged_writes']} acknowledged, 0 lost, "
          f"calls {report['client_calls']}, longest call {report['client_stall_max_ms']} ms")


def test_the_consolidation_rehearsal_through_a_relay_per_shard_ends_no_session_there_and_back(cli):
    """`rehearse consolidate --router relay`: every shard behind a relay of its own; the fleet's
    cutover and the one-server rollback hold and move the relays' sessions. The report reads each
    shard's relay (not the DSN file, which nothing changes), and so does `consolidate status`."""
    needs_go()
    r = cli("rehearse", "consolidate", "--router", "relay", "--json", "--rows", "500", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[:3000]
    rep = jsonlines.result(r.stdout)
    assert rep["router"] == "relay" and rep["run_status"] == "done" and rep["ok"], rep["summary"]
    assert rep["lost_writes"] == 0 and rep["acknowledged_writes"] > 0 and rep["misrouted_shards"] == 0
    assert rep["checksum_differences"] == 0 and rep["old_servers_not_replicating_back"] == 0
    no_pool_saw_an_error(rep)
    # Each old server's app sessions moved by its shards' relays, none ended (cutover and rollback).
    ends = [s["sentence"] for s in rep["steps"] if s["name"].endswith(": end sessions")]
    assert len(ends) == 4 and all("relays moved them" in s for s in ends), ends
    assert "relay's held sessions released" in rep["rollback"], rep["rollback"]
    rolled = rep["rolled_back_server"]
    assert rolled, rep["rollback"]
    for sh, s in rep["shards"].items():
        instance = rep["instances"][s["instance"]]["address"]
        assert s["through"] != s["served_by"] and s["lost"] == 0, (sh, s)  # the relay, in front of its server
        assert s["served_by"] == s["expected"], (sh, s)  # read on the relay's control socket
        if s["old_server"] == rolled:
            assert s["served_by"] != instance and not s["moved"], (sh, s)  # served by its old server again
        else:
            assert s["served_by"] == instance and s["acked_on_new"] >= 20, (sh, s)
    # `consolidate status` reads the relays too: no problem, the rolled-back shards on their old server.
    st = rep["status"]
    assert st["problems"] == [] and set(st["relays"]) == set(rep["shards"]), st
    for s in st["shards"]:
        if s["old"] == rolled:
            assert s["served_by"] == "old server" and "as after a rollback" in s["stage"], s
        else:
            assert s["served_by"] == "new instance" and s["stage"].startswith("moved (old server replicating"), s
    errors = {sh: s["writer_errors"] for sh, s in rep["shards"].items() if s["writer_errors"]}
    print(f"consolidation through a relay per shard, cutover and {rolled} rolled back: "
          f"{rep['acknowledged_writes']} acknowledged, 0 lost, calls {rep['client_calls']}, longest call "
          f"{rep['client_stall_max_ms']} ms, shard writers' errors {errors or 'none'}, "
          f"longest writer gap {max(s['longest_gap_ms'] for s in rep['shards'].values())} ms")
