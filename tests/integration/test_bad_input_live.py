"""Bad input to commands that would change a real server: one line, exit 2, and the
server's settings exactly as they were."""

from __future__ import annotations

import pytest

from dbmigrate.db.inspector import Inspector

pytestmark = pytest.mark.integration


def slow_log_settings(inv, name):
    with inv.open(name) as s:
        return Inspector(s).slow_log_settings()


@pytest.mark.parametrize("extra", [["--seconds", "nan"], ["--seconds", "1e9"],
                                   ["--server-log-file", "EXISTING"], ["--server-log-file", "relative.log"]])
def test_capture_refuses_and_leaves_the_slow_log_alone(demo, demo_inventory, cli, tmp_path, extra):
    name = f"{demo.name}-1"
    existing = tmp_path / "app-slow.log"
    existing.write_text("# an operator's own slow log\n")
    extra = [str(existing) if x == "EXISTING" else x for x in extra]
    before = slow_log_settings(demo_inventory, name)
    r = cli("digest", "capture", "-i", str(demo.inventory_file), "-s", name, "--seconds", "1", *extra)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2
    assert slow_log_settings(demo_inventory, name) == before
    assert existing.read_text() == "# an operator's own slow log\n"
