"""`dbmigrate rehearse promote --router relay`: the main job with the relay in front of the
sandbox. With `--regress` the guard rolls the cutover back by itself, so one rehearsal switches
the writer there and back through the relay's hold, under the three application pools
(server-side prepared statements, kept connections), the zero-loss writer, sysbench and the
read load, all writing through the relay."""

from __future__ import annotations

import pytest

from tests import jsonlines

pytestmark = pytest.mark.integration

KINDS = ("go_pool", "hikari_pool", "naive_pool")


def test_the_rehearsal_through_the_relay_ends_no_session_there_and_back(cli):
    from dbmigrate.rehearsal.sandbox import relay

    try:
        relay.go_binary()
    except Exception as e:  # noqa: BLE001 - the reason is the skip's message
        pytest.skip(str(e))
    r = cli("rehearse", "promote", "--router", "relay", "--regress", "--json", "--load-seconds", "2", timeout=400)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[:3000]
    report = jsonlines.result(r.stdout)
    assert report["router"] == "relay"
    assert report["rolled_back"] is True and report["guard"]["rollback"] is True, report.get("guard_windows")
    assert report["lost_writes"] == 0 and report["acknowledged_writes"] > 0
    assert set(report["client_errors"]) == set(KINDS), report["client_errors"]
    for kind in KINDS:
        assert report["client_calls"][kind] > 0, report["client_calls"]
        assert report["client_errors"][kind] == 0, (kind, report["client_error_classes"])
    assert report["reads"]["queries"] > 0 and report["reads"]["errors"] == 0, report["reads"]
    print(f"through the relay, promote and the guard's rollback: {report['acknowledged_writes']} acknowledged, "
          f"0 lost, calls {report['client_calls']}, longest call {report['client_stall_max_ms']} ms, "
          f"fenced window {report['fenced_ms']} ms, rollback {report['rollback_s']} s")


def test_the_schema_swap_rehearsal_through_the_relay_switches_there_and_back_with_no_error(cli):
    from dbmigrate.rehearsal.sandbox import relay

    try:
        relay.go_binary()
    except Exception as e:  # noqa: BLE001 - the reason is the skip's message
        pytest.skip(str(e))
    r = cli("rehearse", "schema-swap", "--router", "relay", "--json", "--rows", "2000", timeout=400)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[:3000]
    report = jsonlines.result(r.stdout)
    assert report["router"] == "relay" and report["run_status"] == "done"
    assert report["primary_back"] is True and all(report["altered"].values()), report["altered"]
    assert report["lost_writes"] == 0 and report["acknowledged_writes"] > 0
    for kind in KINDS:
        assert report["client_calls"][kind] > 0, report["client_calls"]
        assert report["client_errors"][kind] == 0, (kind, report["client_error_classes"])
    assert report["reads"]["queries"] > 0 and report["reads"]["errors"] == 0, report["reads"]
    print(f"schema swap through the relay, there and back: {report['acknowledged_writes']} acknowledged, 0 lost, "
          f"calls {report['client_calls']}, longest call {report['client_stall_max_ms']} ms")
