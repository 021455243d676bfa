"""sysbench against the shared sandbox's primary as the app user: prepare, a short
run with a parsed report, a background run that restarts, and no password on argv."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbmigrate.rehearsal.sysbench import Sysbench, SysbenchError

pytestmark = pytest.mark.integration


def _argv_of_tree(pid: int) -> list[str]:
    """Command lines of pid and its children (timeout -> sysbench)."""
    out = []
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for p in pids:
        try:
            out.append(Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except FileNotFoundError:
            pass
    return out


@pytest.fixture(scope="module")
def bench(demo_inventory):
    spec = demo_inventory.cluster("shared").servers["shared-1"]
    sb = Sysbench(spec.host, spec.port, demo_inventory.app_credentials("shared"), workload="oltp_write_only",
                  tables=1, table_size=500, threads=2)
    sb.prepare(timeout_s=60)
    yield sb
    sb.cleanup(timeout_s=60)  # leave the shared sandbox as we found it


def test_run_reports_throughput_and_latency(bench):
    r = bench.run(2, report_interval=1)
    assert r.complete and r.exit_code == 0
    assert r.tps > 0 and r.qps > r.tps and r.transactions > 0
    assert 0 < r.latency_avg_ms <= r.latency_max_ms and r.latency_p95_ms > 0
    assert r.errors is not None and r.reconnects == 0
    assert len(r.intervals) >= 1 and r.intervals[0].threads == 2


def test_background_run_restarts_and_keeps_password_off_argv(bench):
    password = bench.credentials.password
    run = bench.start_background(120, report_interval=1)
    try:
        first_pid = run.pid
        samples = run.wait_for_samples(1, timeout_s=20)
        assert samples[0].tps > 0
        argvs = _argv_of_tree(first_pid)
        assert any("sysbench" in a for a in argvs)
        assert not any(password in a for a in argvs)
        previous = run.restart()  # what a switchover does after the flip (sysbench bug #527)
        assert run.pid != first_pid and len(previous.intervals) >= 1
        assert run.wait_for_samples(1, timeout_s=20)[0].tps > 0
    finally:
        result = run.stop()
    assert not run.alive and result.intervals and not result.complete


def test_wrong_password_fails_clearly(demo_inventory):
    from dbmigrate.db.credentials import Credentials

    spec = demo_inventory.cluster("shared").servers["shared-1"]
    sb = Sysbench(spec.host, spec.port, Credentials("dbm_app", "not-the-password"), tables=1, table_size=10)
    with pytest.raises(SysbenchError, match=r"failed \(exit 1\).*Access denied") as e:
        sb.run(1, timeout_s=20)
    assert "not-the-password" not in str(e.value)
