"""Percona Toolkit programs that connect: pt-heartbeat feeds the lag reader, and
pt-table-checksum finds a replica whose data drifted. Credentials reach them by a
private defaults file: never on their command line."""

from __future__ import annotations

import time

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.lag import HeartbeatTable, sample_lag
from dbmigrate.rehearsal.sandbox.accounts import read_option_file
from dbmigrate.tools.pt_connect import PtHeartbeat
from tests import jsonlines

pytestmark = pytest.mark.integration
NAME = "ptools"


@pytest.fixture(scope="module")
def box(boxes):
    state = boxes.up(NAME, 2)
    inv = load_inventory(state.inventory_file)
    with inv.open(f"{NAME}-1") as p:
        p.execute("CREATE TABLE app.accounts (id INT PRIMARY KEY, balance INT)")
        p.execute("INSERT INTO app.accounts VALUES " + ",".join(f"({i},{i * 10})" for i in range(1, 501)))
    yield state, inv
    boxes.down(NAME)


def test_pt_heartbeat_drives_the_lag_reader(box):
    state, inv = box
    secret = read_option_file(state.credentials_file)["admin"].password
    with inv.open(f"{NAME}-1") as p, inv.open(f"{NAME}-2") as r:
        with PtHeartbeat(p, interval_s=0.05) as hb:
            cmdline = open(f"/proc/{hb.proc.pid}/cmdline", "rb").read().decode(errors="replace")
            assert secret not in cmdline and "--defaults-file=" in cmdline
            time.sleep(0.5)
            [fresh] = sample_lag(p, [r], write=False, hb=HeartbeatTable.pt_heartbeat())
            assert fresh.heartbeat == "fresh" and fresh.lag_ms is not None and fresh.lag_ms < 1000
            r.execute("STOP SLAVE SQL_THREAD")
            try:
                time.sleep(1.6)
                [late] = sample_lag(p, [r], write=False, hb=HeartbeatTable.pt_heartbeat())
                assert late.lag_ms is not None and late.lag_ms > 1000, late
            finally:
                r.execute("START SLAVE SQL_THREAD")
        assert hb.proc.poll() is not None  # stopped with the context


def test_pt_table_checksum_names_the_drifted_replica(box, cli):
    state, inv = box
    r = cli("checksum", "-i", str(state.inventory_file), "-c", NAME, "-d", "app", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    clean = jsonlines.result(r.stdout)
    assert clean["ok"] and clean["diffs"] == {f"{NAME}-2": [], f"{NAME}-3": []}
    with inv.open(f"{NAME}-3") as rep:
        rep.execute("SET SESSION sql_log_bin=0")
        rep.execute("UPDATE app.accounts SET balance = balance + 1 WHERE id = 42")
    r = cli("checksum", "-i", str(state.inventory_file), "-c", NAME, "-d", "app", "--json")
    assert r.returncode == 1
    drift = jsonlines.result(r.stdout)
    assert drift["diffs"][f"{NAME}-2"] == []
    assert [d["table"] for d in drift["diffs"][f"{NAME}-3"]] == ["app.accounts"]
    assert read_option_file(state.credentials_file)["admin"].password not in r.stdout + r.stderr
    with inv.open(f"{NAME}-3") as rep:  # leave the replica as it was
        rep.execute("SET SESSION sql_log_bin=0")
        rep.execute("UPDATE app.accounts SET balance = balance - 1 WHERE id = 42")
