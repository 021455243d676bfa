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
          "params": {"candidate": f"{name}-new", "catchup_timeout_s": 3, "fence_drain_timeout_s": 0.5, "lag_wait_s": 0}}
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


def test_preflight_refuses_bad_paths_before_the_fence(boxes, monkeypatch, cli):
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
    # A script tells a refusal (nothing happened) from a rollback by the exit code alone.
    r = cli("run", str(_variant(state, name, "backend", router(writer_backend="writers"))), "--yes")
    assert r.returncode == 5 and "refused before any change" in r.stdout + r.stderr, (r.returncode, r.stderr)
    assert kit.shape(inv, name) == before

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


def _bypass_account(inv, name: str) -> tuple[str, int]:
    """An account 'ops' that bypasses read_only through a role, with a table of its own."""
    with inv.open(f"{name}-1") as p:
        for sql in ("CREATE DATABASE opsdb", "CREATE TABLE opsdb.t (id INT PRIMARY KEY)",
                    "CREATE ROLE ro_bypass", "GRANT READ_ONLY ADMIN ON *.* TO ro_bypass",
                    "CREATE USER ops@'%' IDENTIFIED BY 'ops-pw'", "GRANT ALL ON opsdb.* TO ops@'%'",
                    "GRANT ro_bypass TO ops@'%'", "SET DEFAULT ROLE ro_bypass FOR ops@'%'"):
            p.execute(sql)
        return p.host, p.port


def _ops_writer(host: str, port: int):
    """A session of 'ops' on the old primary writing one row every few ms; returns (stop, acked ids)."""
    import threading

    import mysql.connector

    acked: list[int] = []
    stop = threading.Event()
    conn = mysql.connector.connect(host=host, port=port, user="ops", password="ops-pw", autocommit=True,
                                   use_pure=True, ssl_disabled=True)

    def loop():
        i = 0
        while not stop.is_set():
            i += 1
            try:
                conn.cmd_query(f"INSERT INTO opsdb.t VALUES ({i})")
                acked.append(i)
            except Exception:
                return  # its session was ended
            stop.wait(0.005)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    while not acked:
        stop.wait(0.01)
    return stop, t, acked


def test_a_session_of_an_account_that_bypasses_read_only_is_refused_unless_allowed(boxes):
    name = "pfb"
    state, inv = kit.topology(boxes, name)
    host, port = _bypass_account(inv, name)
    stop, thread, acked = _ops_writer(host, port)
    before = kit.shape(inv, name)

    outcome = start_run(kit.playbook(state, name, params={"lag_wait_s": 0}), assume_yes=True)
    _assert_refused_unchanged(outcome, inv, name, before, "read_only_bypass: account(s) ops bypass read_only")

    outcome = start_run(kit.playbook(state, name, params={"allow_read_only_bypass": ["ops"]}), assume_yes=True)
    assert outcome.status == "done", outcome.summary
    thread.join(10)
    assert not thread.is_alive()  # its session was ended before the candidate opened
    stop.set()
    with inv.open(f"{name}-new") as new:
        on_new = {int(r["id"]) for r in new.query("SELECT id FROM opsdb.t")}
    assert set(acked) <= on_new, sorted(set(acked) - on_new)[:10]
    boxes.down(name)
