"""`dbmigrate rehearse schema-swap`: the A/B schema change end to end on its own sandbox, under load."""

from __future__ import annotations

import pytest

from tests import jsonlines

pytestmark = pytest.mark.integration


def test_rehearse_schema_swap_alters_every_server_and_loses_nothing(cli):
    r = cli("rehearse", "schema-swap", "--json", "--name", "rswap", "--rows", "2000", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    report = jsonlines.result(r.stdout)
    assert report["sandbox"] == "rswap"
    assert report["run_status"] == "done", report["summary"]
    assert report["altered"] == {"rswap-1": True, "rswap-2": True, "rswap-3": True}
    assert report["primary_back"] is True and report["writable"] == ["rswap-1"]
    assert report["acknowledged_writes"] > 0 and report["lost_writes"] == 0
    after = {s["name"]: s for s in report["topology_after"]}
    assert after["rswap-2"]["source"] == after["rswap-3"]["source"] == "rswap-1"
    assert after["rswap-2"]["replicating"] and after["rswap-3"]["replicating"]
    assert jsonlines.summary(r.stdout)["exit_code"] == 0
