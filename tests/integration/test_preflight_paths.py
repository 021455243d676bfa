"""Bad settings that only a real path shows are refused by preflight, before the fence, in
one line, with every server left as it was: a replica that is down, a router socket that does
not exist, a writer backend that does not exist, a wrong replication password."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dbmigrate.app.runs import start_run
from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration


def _variant(state, name: str, tag: str, change) -> Path:
    """A copy of the sandbox inventory with `change(cluster_doc)` applied, and a playbook on it."""
    doc = yaml.safe_load(state.inventory_file.read_text())
    change(doc["clusters"][name])
    inv_path = state.inventory_file.with_name(f"inventory-{tag}.yaml")
    inv_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    pb = {"procedure": "promote", "inventory": str(inv_path), "cluster": name,
          "params": {"candidate": f"{name}-new", "catchup_timeout_s": 3, "drain_timeout_s": 0.5, "lag_wait_s": 0}}
    path = state.path / f"promote-{tag}.yaml"
    path.write_text(yaml.safe_dump(pb, sort_keys=False))
    return path


def _assert_refused_unchanged(outcome, inv, name: str, before, *expected: str) -> None:
    assert outcome.status == "refused", outcome.summary
    assert outcome.summary.startswith("refused before any change: "), outcome.summary
    assert "\n" not in outcome.summary
    for text in expected:
        assert text in outcome.summary, outcome.summary
    assert kit.shape(inv, name) == before


def test_preflight_refuses_bad_paths_before_the_fence(boxes, monkeypatch):
    name = "pfp"
    state, inv = kit.topology(boxes, name)
    before = kit.shape(inv, name)
    assert kit.writers(before) == [f"{name}-1"]

    def router(**fields):
        return lambda c: c["router"].update(fields)

    outcome = start_run(_variant(state, name, "sock", router(admin_socket=str(state.path / "nowhere.sock"))),
                        assume_yes=True)
    _assert_refused_unchanged(outcome, inv, name, before, "router: ", "nowhere.sock")

    outcome = start_run(_variant(state, name, "backend", router(writer_backend="writers")), assume_yes=True)
    _assert_refused_unchanged(outcome, inv, name, before, "router: ", "writers")

    repl_user = inv.replication_credentials(name).user
    monkeypatch.setenv("DBM_TEST_WRONG_REPL_PW", "not-the-password")
    outcome = start_run(_variant(state, name, "pw", lambda c: c.update(replication_credentials={
        "user": repl_user, "password_env": "DBM_TEST_WRONG_REPL_PW"})), assume_yes=True)
    _assert_refused_unchanged(outcome, inv, name, before, "replication_login: ", f"{name}-1", f"{name}-new")

    boxes.stop_instance(name, f"{name}-3")
    outcome = start_run(kit.playbook(state, name, params={"lag_wait_s": 0}), assume_yes=True)
    assert outcome.status == "refused", outcome.summary
    assert f"servers_answer: {name}-3: does not answer" in outcome.summary, outcome.summary
    boxes.start_instance(name, f"{name}-3")
    boxes.down(name)
