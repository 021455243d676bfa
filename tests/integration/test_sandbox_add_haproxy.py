"""The README's promote setup, in its order: `sandbox up --haproxy`, then
`sandbox add-instance` for the new hardware, then a promote through the router.
The added instance must be in HAProxy's backends, or the run fails at the switch."""

from __future__ import annotations

import json

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.routing import router_for
from tests.integration import promote_kit as kit
from tests.integration.test_routing_haproxy import server_id_via

pytestmark = pytest.mark.integration
NAME = "addhap"


@pytest.fixture(scope="module")
def box(boxes, cli):
    up = cli("sandbox", "up", "--name", NAME, "--replicas", "1", "--haproxy", "--json")
    assert up.returncode == 0, up.stderr
    added = cli("sandbox", "add-instance", NAME, "--instance", f"{NAME}-new", "--replica-of", f"{NAME}-1")
    assert added.returncode == 0, added.stderr
    yield boxes.find(NAME)
    boxes.down(NAME)


def test_added_replica_is_in_both_backends_and_survives_a_restart(box, boxes):
    inv = load_inventory(box.inventory_file)
    router = router_for(inv, NAME)
    new = f"127.0.0.1:{inv.cluster(NAME).servers[f'{NAME}-new'].port}"
    st = router.current()
    assert new in st.readers and new not in st.writers
    assert f"server {NAME}-new {new}" in open(box.haproxy["config"]).read()
    from dbmigrate.rehearsal.sandbox import haproxy

    haproxy.restart(boxes, NAME)
    assert new in router.current().readers


def test_promote_to_the_added_instance_switches_the_router(box, cli):
    inv = load_inventory(box.inventory_file)
    app = inv.app_credentials(NAME)
    spec = inv.cluster(NAME)
    new_id = box.instances[f"{NAME}-new"].server_id
    run = cli("run", str(kit.playbook(box, NAME)), "--yes", "--json", timeout=180)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr
    steps = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert any(s.get("name") == "switch router" and s.get("status") == "done" for s in steps), run.stdout[-2000:]
    assert server_id_via(spec.router.writer_port, app) == new_id
    run_id = next(s["run_id"] for s in steps if s.get("run_id"))
    back = cli("rollback", run_id, "--yes", timeout=180)
    assert back.returncode == 0, back.stdout[-2000:] + back.stderr
    assert server_id_via(spec.router.writer_port, app) == 1
