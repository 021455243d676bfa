"""What the application sees of a promote and its rollback through HAProxy, on real servers:
a Go database/sql-like pool writing through the router never meets the fence (no 1290: new
connections wait in HAProxy's queue during the window, the old writer's sessions end only when
idle), and reader connections on a server that stays a reader are never ended.

The hold is opt-in; without it (the default) the readers' sessions are left alone too.

What is left (measured, docs/operations/what-the-application-sees.md): a statement already sent
when the server ends its session as idle (still on its way through HAProxy, read by no server
thread yet) is lost, a 2013; about one switchover in three at a call every ~5 ms, at most one
per switchover here."""

from __future__ import annotations

import mysql.connector
import pytest

from dbmigrate.app.runs import rollback_run, start_run
from dbmigrate.rehearsal.clients import ClientProcess, FixedAddress, create_table
from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration


def readers_on(inv, name: str, server: str, count: int = 6) -> list:
    """Reader connections through the readers' route, kept where they landed on `server`."""
    router, creds = inv.cluster(name).router, inv.app_credentials(name)
    port = inv.cluster(name).servers[server].port
    kept = []
    for _ in range(count):
        c = mysql.connector.connect(host=router.address, port=router.reader_port, user=creds.user,
                                    password=creds.password or "", use_pure=True, ssl_disabled=True)
        cur = c.cursor()
        cur.execute("SELECT @@port")
        if cur.fetchone()[0] == port:
            kept.append(c)
        else:
            c.close()
    return kept


def still_read(conns: list) -> int:
    ok = 0
    for c in conns:
        cur = c.cursor(prepared=True)
        cur.execute("SELECT COUNT(*) FROM app.client_writes WHERE id > ?", (0,))
        cur.fetchall()
        ok += 1
    return ok


def where(run_id: str, seen: dict) -> str:
    """The pool's errors among the run's steps (for a failure's message)."""
    from dbmigrate.app.runs import resolve_journal_path
    from dbmigrate.engine.journal import Journal

    with Journal(resolve_journal_path()) as j:
        steps = [(r["started_at"], r["finished_at"], r["name"]) for r in j.step_rows(run_id)]
    return f"{seen}; steps: {steps}"


def sentences(run_id: str) -> str:
    from dbmigrate.app.runs import resolve_journal_path
    from dbmigrate.engine.journal import Journal

    with Journal(resolve_journal_path()) as j:
        return " | ".join(str(r["sentence"] or "") for r in j.step_rows(run_id))


def test_a_go_like_pool_sees_nothing_of_a_promote_and_its_rollback_and_readers_stay(boxes):
    name = "sees"
    state, inv = kit.topology(boxes, name)
    with inv.open(f"{name}-1") as p:
        create_table(p)
    router = inv.cluster(name).router
    # In a process of its own, as the application is (see ClientProcess).
    clients = ClientProcess(FixedAddress(router.address, router.writer_port), inv.app_credentials(name),
                            kinds=("go_pool",), size=3).start()
    try:
        assert clients.wait_for_calls(20)
        stays_reader = readers_on(inv, name, f"{name}-new")  # a reader before, as primary, and after
        assert stays_reader, "no reader connection landed on the candidate"

        # The hold is opt-in (hold_new_connections is off by default).
        outcome = start_run(kit.playbook(state, name, {"hold_new_connections": True}), assume_yes=True)
        assert outcome.status == "done", outcome.summary
        # Engaged through the run's journaled router, not skipped.
        assert "new connections held by the router" in sentences(outcome.run_id), sentences(outcome.run_id)
        assert clients.wait_for_calls(40)
        after_promote = clients.summary()
        assert not after_promote["client_error_classes"]["go_pool"].get("1290"), where(outcome.run_id, after_promote)
        assert after_promote["client_errors"]["go_pool"] <= 1, where(outcome.run_id, after_promote)
        assert after_promote["client_stall_max_ms"] < 1000, after_promote

        back = rollback_run(outcome.run_id, assume_yes=True)
        assert back.status == "rolled_back", back.summary
        assert clients.wait_for_calls(60)
        seen = clients.summary()
        assert not seen["client_error_classes"]["go_pool"].get("1290"), where(outcome.run_id, seen)
        assert seen["client_errors"]["go_pool"] <= 2, where(outcome.run_id, seen)
        # The candidate was a reader throughout (the readers' backend never changed): its reader
        # sessions were left alone by the promote's and the rollback's session ending.
        assert still_read(stays_reader) == len(stays_reader)
        print(f"\ngo_pool through a promote and its rollback: {seen['client_errors']}, longest call "
              f"{seen['client_stall_max_ms']} ms over {seen['client_calls']} calls; "
              f"{len(stays_reader)} reader session(s) kept")

        # Without the hold (the default) the candidate's reader sessions are left alone too by
        # the rollback's session ending there (the demoted writer's).
        plain = start_run(kit.playbook(state, name), assume_yes=True)
        assert plain.status == "done", plain.summary
        back = rollback_run(plain.run_id, assume_yes=True)
        assert back.status == "rolled_back", back.summary
        said = sentences(plain.run_id)
        assert "new connections held" not in said
        assert f"{len(stays_reader)} reader session(s) left alone" in said, said
        assert still_read(stays_reader) == len(stays_reader)
    finally:
        clients.stop()
    boxes.down(name)
