"""`dbmigrate rehearse schema-swap`: the A/B schema change end to end on its own sandbox, under load."""

from __future__ import annotations

import pytest

from tests import jsonlines

pytestmark = pytest.mark.integration


def test_rehearse_schema_swap_alters_every_server_and_loses_nothing(cli, tmp_path):
    html_file = tmp_path / "swap.html"
    r = cli("rehearse", "schema-swap", "--json", "--name", "rswap", "--rows", "2000", "--report", str(html_file),
            timeout=600)
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

    # The report (the CI templates' artifact) carries the loss evidence and the timeline, fenced window first.
    import json

    page = html_file.read_text()
    assert "fenced window: " in page and 'data-lost="0"' in page and "acknowledged writes: " in page
    assert "no timeline samples were recorded" not in page
    numbers = json.loads(html_file.with_suffix(".json").read_text())
    assert numbers["evidence"]["verifier"]["acknowledged"] == report["acknowledged_writes"]
    assert numbers["evidence"]["verifier"]["lost_total"] == 0 and numbers["evidence"]["acks"]["counts"]
    assert numbers["evidence"]["write_gaps"]["fenced_ms"] == report["fenced_ms"] is not None
