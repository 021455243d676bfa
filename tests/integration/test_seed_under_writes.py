"""A physical seed under a steady writer costs the source nothing it can feel.

One old server with a 60 MB shard and a writer committing every 5 ms through the DSN file;
the consolidate playbook copies it physically, paced at 15 MB/s so that the relay is
pacing when the backup reaches its locking stages (where the commit stall came from:
the backup's commit lock held while its redo tail crossed the paced relay, and its redo
copy's 1 s poll). The writer's (in a process of its own) longest gap while the seed step ran stays at or
under 100 ms, and every progress report before the copy ended says less than 100% of an
estimate at least as big as what was copied so far (the whole datadir, measured first).
"""

from __future__ import annotations

import io
import json
import re
import time

from rich.console import Console

import pytest
import yaml

from dbmigrate.app.runs import resolve_journal_path, start_run
from dbmigrate.cli.render import ConsoleRenderer
from dbmigrate.config import HostSpec
from dbmigrate.engine.journal import Journal
from dbmigrate.procedures.consolidate.physical_seed import REDO_WARN_BYTES
from dbmigrate.procedures.consolidate.plan import measure_shards, plan
from dbmigrate.procedures.consolidate.resources import ConsolidateState
from dbmigrate.rehearsal.provision import install as install_sandbox_provisioner
from dbmigrate.rehearsal.sandbox.ports import free_port_range
from dbmigrate.rehearsal.verify.shard_writer import ShardWriterProcess
from dbmigrate.report.series import iso_to_epoch

from tests.integration.shard_kit import add_blob_table, legacy_shards

pytestmark = pytest.mark.integration

NAME, OLD, SHARD = "cseed", "cseed-1", "shard_s"
STALL_BOUND_MS = 100


def settle_redo(server, below_mb: float = 2, within_s: float = 60) -> float:
    """Wait until the server's checkpoint has caught up with the blob load (a server at steady
    state): what crosses under the backup's commit lock is the redo since the last checkpoint, so
    a load seconds old would measure the page cleaner's pace on this machine, not the seed's.
    Returns the checkpoint age in MB it reached."""
    server.execute("SET GLOBAL innodb_max_dirty_pages_pct = 0")  # the cleaner flushes the load now
    try:
        deadline, age = time.monotonic() + within_s, float("inf")
        while time.monotonic() < deadline:
            row = server.query("SHOW GLOBAL STATUS LIKE 'Innodb_checkpoint_age'")
            age = int(row[0]["Value"]) / 1e6
            if age < below_mb:
                break
            time.sleep(0.2)
        return age
    finally:
        server.execute("SET GLOBAL innodb_max_dirty_pages_pct = DEFAULT")


@pytest.fixture  # function scope: a rerun gets a server that has not been consolidated yet
def old_server(boxes):
    install_sandbox_provisioner()  # the run is started in this process: the sandbox creates the instance
    state, inv, routes = legacy_shards(boxes, NAME, {OLD: [SHARD]}, rows=300)
    try:
        with inv.open(OLD) as s:
            add_blob_table(s, SHARD, 60)
            assert settle_redo(s) < 2, "the checkpoint did not catch up with the blob load within 60 s"
        yield state, inv, routes
    finally:
        boxes.down(NAME)


def test_a_paced_physical_seed_never_stalls_the_writer_over_100_ms_and_never_says_100_percent_early(old_server):
    state, inv, routes = old_server
    p = plan(measure_shards(inv, sample_s=0.1), {"s": HostSpec(cores=2, memory_gb=1, disk_gb=5, max_instances=1,
                                                               sandbox=NAME, base_port=free_port_range(1))},
             inv.planning, "instance-per-group")
    plan_file = state.path / "plan-seed.json"
    plan_file.write_text(json.dumps(p.to_dict()))
    book = state.path / "consolidate-seed.yaml"
    book.write_text(yaml.safe_dump({"procedure": "consolidate", "inventory": "legacy.yaml", "cluster": NAME,
                                    "params": {"plan": plan_file.name, "catchup_timeout_s": 10, "fence_drain_timeout_s": 0.3,
                                               "seed": {"method": "physical", "throttle_mb_s": 15,
                                                        "max_source_p999_ms": 250, "progress_every_s": 0.5}}}))
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False)  # the run's line output, at 80 columns
    # In a process of its own, as an application is (in this one it would time the relay's turns).
    writer = ShardWriterProcess(routes, SHARD, inv.app_credentials(NAME), interval_s=0.005)
    try:
        spec = inv.cluster(NAME).servers[OLD]
        assert writer.wait_acks_on(f"{spec.host}:{spec.port}", 50, 20), writer.errors
        outcome = start_run(book, assume_yes=True, subscribers=[ConsoleRenderer(console)])
        assert outcome.status == "done", outcome.summary
    finally:
        writer.stop()
    with Journal(resolve_journal_path()) as j:
        run = j.run_detail(outcome.run_id)
    step = next(s for s in run["steps"] if s["name"].startswith("seed ") and s["action"] == "run")
    t0, t1 = iso_to_epoch(step["started_at"]), iso_to_epoch(step["finished_at"])
    times = [t for _, _, t in writer.acks if t0 - 0.5 <= t <= t1 + 0.5]
    gaps = sorted((b - a) * 1000 for a, b in zip(times, times[1:]))
    facts = next(iter(ConsolidateState.load(run["state"]).seeds.values()))
    reports = [m["labels"] for m in run["metrics"] if m["name"] == "seed_rate_mb_s" and "pct" in m["labels"]]
    print(f"seed step {t1 - t0:.1f} s, {len(times)} writes, longest gaps {[round(g) for g in gaps[-3:]]} ms; "
          f"{facts['bytes'] / 1e6:.0f} MB copied of an estimate of {facts['estimate_bytes'] / 1e6:.0f} MB; "
          f"backup locks {facts['backup_lock_s']} s (commit lock {facts['commit_lock_s']} s, "
          f"{facts['bytes_under_commit_lock'] / 1e6:.1f} MB crossed under it); longest heartbeat "
          f"commit {facts['longest_source_write_ms']} ms; redo since the checkpoint at the start "
          f"{facts['redo_since_checkpoint_bytes'] / 1e6:.1f} MB; {len(reports)} progress reports: "
          + ", ".join(f"{r['pct']}%" for r in reports))
    assert facts["method"] == "physical" and facts["rate_mb_s"] <= 20, facts  # it was paced
    # Read before the copy: the redo that would cross under the commit lock; the settled server's is small.
    assert facts["redo_since_checkpoint_bytes"] is not None and facts["redo_since_checkpoint_bytes"] < REDO_WARN_BYTES
    assert len(times) > 100 and gaps[-1] <= STALL_BOUND_MS, gaps[-5:]
    assert facts["commit_lock_s"] < STALL_BOUND_MS / 1000 and facts["bytes_under_commit_lock"] >= 0, facts
    # The estimate is the whole datadir, not the shard: at least what the copy carried, give or take its redo.
    assert facts["estimate_bytes"] >= 0.8 * facts["bytes"], facts
    running, final = reports[:-1], reports[-1]
    assert len(running) >= 3, reports
    for r in running:
        assert float(r["pct"]) < 100 and int(r["total_bytes"]) >= int(r["bytes"]) and r["eta_s"] != "0", r
    assert float(final["pct"]) == 100 and int(final["bytes"]) == facts["bytes"], final
    # The line output says the same, at least every 10 s, never 100% (nor ETA 0 s, nor "of ~0 MB") before the end.
    text = " ".join(out.getvalue().split())  # rich wraps at 80 columns
    progress = re.findall(r"… seed \S+ from \S+: (.*?)(?=… |✓|$)", text)
    copying = [p for p in progress if " at " in p and "MB/s" in p]
    assert len(copying) >= len(running), text[-2000:]
    assert not any("100%" in p or "ETA 0 s" in p or "of ~0 MB" in p for p in copying[:-1]), copying
    assert "copied (done)" in copying[-1], copying[-1]
