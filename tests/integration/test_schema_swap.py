"""Schema swaps on real servers behind HAProxy, under writes (zero-loss verifier) and reads
(through the reader port): the change lands everywhere without a GTID of its own, nothing
acknowledged is lost, and the cluster ends in the requested shape.

One sandbox (primary swap-1, replicas swap-2 and swap-3) serves the module; tests run in
file order and each one starts from whatever primary the previous one left (the
procedure finds it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dbmigrate import gates
from dbmigrate.app.runs import resolve_journal_path, start_run
from dbmigrate.config import load_inventory
from dbmigrate.db.inspector import Inspector
from dbmigrate.engine.events import StepFinished, StepStarted
from dbmigrate.engine.journal import Journal
from dbmigrate.routing import router_for
from dbmigrate.rehearsal.sandbox import haproxy
from dbmigrate.rehearsal.readload import ReadLoad, create_orders

from tests import jsonlines
from tests.integration import promote_kit as kit

pytestmark = pytest.mark.integration

NAME = "swap"
SERVERS = (f"{NAME}-1", f"{NAME}-2", f"{NAME}-3")


@pytest.fixture(scope="module")
def cluster(boxes):
    boxes.up(NAME, 2)
    haproxy.start(boxes, NAME)
    state = boxes.find(NAME)
    inv = load_inventory(state.inventory_file)
    with inv.open(f"{NAME}-1") as p:
        create_orders(p, rows=5000, customers=500)
        pos = Inspector(p).gtid_binlog_pos()
    for r in SERVERS[1:]:
        with inv.open(r) as s:
            assert Inspector(s).wait_for_gtid(pos, 10)
    yield state, inv
    boxes.down(NAME)


def playbook(state, params: dict, name: str) -> Path:
    doc = {"procedure": "schema-swap", "inventory": str(state.inventory_file), "cluster": NAME,
           "params": {"drain_timeout_s": 2, "catchup_timeout_s": 3, "max_lag_ms": 2000, **params}}
    path = state.path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def create_table(inv, name: str, table: str = "app.orders") -> str:
    schema, t = table.split(".")
    with inv.open(name) as s:
        return s.query(f"SHOW CREATE TABLE `{schema}`.`{t}`")[0]["Create Table"]


def readers(inv) -> list[str]:
    return sorted(router_for(inv, NAME).current().readers)


def addr(inv, name: str) -> str:
    s = inv.cluster(NAME).servers[name]
    return f"{s.host}:{s.port}"


def server_ids(inv) -> dict[str, int]:
    out = {}
    for n in SERVERS:
        with inv.open(n) as s:
            out[n] = Inspector(s).server_id()
    return out


def binlog_state_origins(inv) -> dict[str, set[int]]:
    """server_ids that appear in each server's gtid_binlog_state (who ever wrote a GTID there)."""
    out = {}
    for n in SERVERS:
        with inv.open(n) as s:
            state = Inspector(s).gtid_state()
        out[n] = {int(g.split("-")[1]) for g in state.split(",") if g}
    return out


class OwnGtidWatch:
    """Reads a side's own GTIDs (entries with its server_id) right before and after its DDL step."""

    def __init__(self, inv):
        self.inv = inv
        self.before: dict[str, list[str]] = {}
        self.after: dict[str, list[str]] = {}
        self.readers_during: dict[str, list[str]] = {}

    def __call__(self, event) -> None:
        if not isinstance(event, (StepStarted, StepFinished)) or event.action != "run" \
                or not event.name.startswith("apply DDL on "):
            return
        side = event.name.removeprefix("apply DDL on ").split(" ")[0]
        with self.inv.open(side) as s:
            own = Inspector(s).own_gtids()
        (self.before if isinstance(event, StepStarted) else self.after)[side] = own
        if isinstance(event, StepStarted):
            self.readers_during[side] = readers(self.inv)


def test_ddl_that_breaks_row_replication_is_refused_before_anything_changes(cluster, cli):
    state, inv = cluster
    shape_before = {n: create_table(inv, n) for n in SERVERS}
    readers_before = readers(inv)
    pb = playbook(state, {"ddl": ["ALTER TABLE app.orders ADD COLUMN ok1 INT NULL",
                                  "ALTER TABLE app.orders DROP COLUMN note"]}, "refused")
    r = cli("run", str(pb), "--yes", "--json")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "statement 2 refused" in r.stderr and "DROP COLUMN note" in r.stderr and "ROW events" in r.stderr
    # no run started: no event at all, only the error record and the closing summary
    assert [x["record"] for x in jsonlines.records(r.stdout)] == ["error", "summary"]
    assert jsonlines.summary(r.stdout)["exit_code"] == 2
    assert {n: create_table(inv, n) for n in SERVERS} == shape_before
    assert readers(inv) == readers_before


def test_swap_under_load_switches_back_and_loses_nothing(cluster):
    state, inv = cluster
    ids = server_ids(inv)
    readers_before = readers(inv)
    assert readers_before == sorted([addr(inv, f"{NAME}-2"), addr(inv, f"{NAME}-3")])
    spec = inv.cluster(NAME)
    load = ReadLoad("127.0.0.1", spec.router.reader_port, inv.app_credentials(NAME), threads=2, customers=500)
    v = kit.start_verifier(inv, NAME)
    load.start()
    watch = OwnGtidWatch(inv)
    try:
        pb = playbook(state, {"ddl": ["ALTER TABLE app.orders ADD COLUMN note2 VARCHAR(32) NULL, "
                                      "ADD INDEX idx_amount (amount), ALGORITHM=INPLACE, LOCK=NONE"],
                              "warm": {"method": "scan", "target_hit_ratio": 0.5, "seconds": 10},
                              "candidate": f"{NAME}-2", "switch_back": True}, "switch-back")
        outcome = start_run(pb, subscribers=[watch], assume_yes=True)
    finally:
        load.stop()
    assert outcome.status == "done", outcome.summary
    report = kit.finish_verifier(v, inv, NAME)
    assert report.lost_total == 0, report.summary()
    assert report.acknowledged > 100
    assert load.summary()["queries"] > 100

    for n in SERVERS:
        ddl = create_table(inv, n)
        assert "`note2` varchar(32) DEFAULT NULL" in ddl and "KEY `idx_amount` (`amount`)" in ddl, (n, ddl)
    # Each side's DDL step wrote no GTID of its own (under replicated writes, so only its own entries count).
    assert sorted(watch.before) == sorted(SERVERS)
    assert watch.after == watch.before
    # Each side was out of the reader pool while its DDL ran; the last replica's reads went elsewhere.
    for side, during in watch.readers_during.items():
        assert addr(inv, side) not in during and during, (side, during)
    # Only servers that were primaries ever wrote GTIDs: swap-3 (never primary) appears nowhere.
    for n, origins in binlog_state_origins(inv).items():
        assert origins <= {ids[f"{NAME}-1"], ids[f"{NAME}-2"]}, (n, origins)

    shape = kit.shape(inv, NAME)
    assert kit.writers(shape) == [f"{NAME}-1"]
    for r in SERVERS[1:]:
        assert shape[r]["source"] == f"{NAME}-1" and shape[r]["running"], shape
    assert router_for(inv, NAME).current().writer == addr(inv, f"{NAME}-1")
    assert readers(inv) == readers_before
    results = gates.run_preflight(inv, NAME, f"{NAME}-2", gates.Limits(max_lag_ms=2000))
    assert all(g.ok for g in results if g.name in ("errant_gtids", "replication_running", "lag")), \
        [(g.name, g.reason) for g in results]

    with Journal(resolve_journal_path()) as j:
        detail = j.run_detail(outcome.run_id)
    sentences = {s["name"]: s["sentence"] for s in detail["steps"] if s["action"] == "run"}
    assert "with the binlog off" in sentences[f"apply DDL on {NAME}-3 (binlog off)"]
    assert "takes no new reads" in sentences[f"take {NAME}-2 out of the reader pool"]
    decided = {(g["phase"], g["name"]): g for g in detail["gates"]}
    assert decided[(f"return {NAME}-2", "warm-up")]["ok"]
    assert decided[("switchover", "promote preflight")]["ok"]


def test_swap_keeping_the_new_primary_from_the_command_line(cluster, cli):
    state, inv = cluster
    pb = playbook(state, {"ddl": ["CREATE INDEX idx_note ON app.orders (note)"],
                          "candidate": f"{NAME}-2", "switch_back": False}, "keep")
    r = cli("run", str(pb), "--yes", "--json", timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    events = jsonlines.events(r.stdout)
    assert events[-1]["event"] == "RunFinished" and events[-1]["status"] == "done"
    for n in SERVERS:
        assert "KEY `idx_note` (`note`)" in create_table(inv, n)
    shape = kit.shape(inv, NAME)
    assert kit.writers(shape) == [f"{NAME}-2"]
    for r_ in (f"{NAME}-1", f"{NAME}-3"):
        assert shape[r_]["source"] == f"{NAME}-2" and shape[r_]["running"], shape
    assert router_for(inv, NAME).current().writer == addr(inv, f"{NAME}-2")
    # The old primary reads, the new one only writes.
    assert readers(inv) == sorted([addr(inv, f"{NAME}-1"), addr(inv, f"{NAME}-3")])
    results = gates.run_preflight(inv, NAME, f"{NAME}-1", gates.Limits(max_lag_ms=2000))
    errant = next(g for g in results if g.name == "errant_gtids")
    assert errant.ok, errant.reason


def test_failed_verification_stops_and_puts_the_side_back(cluster):
    state, inv = cluster
    readers_before = readers(inv)
    primary = kit.writers(kit.shape(inv, NAME))[0]
    sides = [n for n in SERVERS if n != primary]
    pb = playbook(state, {"ddl": ["ALTER TABLE app.orders ADD COLUMN note3 INT NULL"],
                          "verify": [{"table": "app.orders", "index": "no_such_column"}],  # an index: preflight refuses unknown columns
                          "primary": "skip"}, "bad-verify")
    outcome = start_run(pb, assume_yes=True)
    assert outcome.status == "rolled_back", outcome.summary
    assert f"verification failed on {sides[0]}" in outcome.summary and "no_such_column" in outcome.summary
    assert readers(inv) == readers_before  # the side is back in the pool
    assert "`note3`" in create_table(inv, sides[0])  # no undo_ddl: the schema stays, and the run says so
    assert "`note3`" not in create_table(inv, sides[1])  # the run stopped before the next side
    assert "`note3`" not in create_table(inv, primary)
    with Journal(resolve_journal_path()) as j:
        undos = [s for s in j.run_detail(outcome.run_id)["steps"] if s.get("action") == "undo"]
    said = " | ".join(s["sentence"] or "" for s in undos)
    assert "schema left as is" in said and "back in the reader pool" in said, said


def test_an_index_of_the_same_name_on_other_columns_is_not_taken_as_done(cluster):
    """`fx_c (k)` on the first side: `ADD INDEX fx_c (c)` is neither skipped as "already done"
    nor run into the duplicate name; the run names the difference and changes nothing."""
    state, inv = cluster
    primary = kit.writers(kit.shape(inv, NAME))[0]
    sides = [n for n in SERVERS if n != primary]
    with inv.open(primary) as p:
        p.execute("CREATE TABLE app.fx (id INT PRIMARY KEY, k INT, c INT)")
        pos = Inspector(p).gtid_binlog_pos()
    for n in sides:
        with inv.open(n) as s:
            assert Inspector(s).wait_for_gtid(pos, 10)
    with inv.open(sides[0]) as s:
        s.execute("SET STATEMENT sql_log_bin=0 FOR CREATE INDEX fx_c ON app.fx (k)")
    try:
        pb = playbook(state, {"ddl": ["ALTER TABLE app.fx ADD INDEX fx_c (c)"], "primary": "skip"}, "same-name")
        outcome = start_run(pb, assume_yes=True)
        assert outcome.status == "rolled_back", outcome.summary
        assert "app.fx has index fx_c (c) (it is (k))" in outcome.summary, outcome.summary
        assert "KEY `fx_c` (`k`)" in create_table(inv, sides[0], "app.fx")  # as it was
        for n in (sides[1], primary):
            assert "fx_c" not in create_table(inv, n, "app.fx")
    finally:
        with inv.open(primary) as p:
            p.execute("DROP TABLE IF EXISTS app.fx")
