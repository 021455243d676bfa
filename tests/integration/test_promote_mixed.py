"""binlog_format=MIXED: a promote does not need ROW (GTID positions carry it); the preflight
names what needs ROW (the post-fence audit's rows) and the run goes on."""

from __future__ import annotations

import json

import pytest

from dbmigrate.app.runs import resolve_journal_path
from dbmigrate.engine.journal import Journal

from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration


def test_a_promote_on_mixed_binlogs_runs_and_names_what_needs_row(boxes, cli):
    name = "mixed"
    state, inv = kit.topology(boxes, name)
    try:
        for n in inv.cluster(name).servers:
            with inv.open(n) as s:
                s.execute("SET GLOBAL binlog_format = 'MIXED'")
        r = cli("run", str(kit.playbook(state, name)), "--yes", timeout=240)
        said = r.stdout + r.stderr
        assert r.returncode == 0, said[-3000:]
        run_id = said.split("run ", 1)[1].split(":", 1)[0]
        with Journal(resolve_journal_path()) as j:
            gates = json.dumps(j.run_detail(run_id)["gates"], default=str)
        assert "post-fence audit" in gates and "need ROW" in gates, gates[:3000]
        assert kit.writers(kit.shape(inv, name)) == [f"{name}-new"]
    finally:
        boxes.down(name)
