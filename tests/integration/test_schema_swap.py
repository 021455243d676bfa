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

from dbmigrate.procedures.kit import preflight_checks
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


def inventory_variant(state, name: str, *, repl_password: str | None = None, admin_socket: str | None = None) -> Path:
    """A copy of the sandbox's inventory with one thing wrong (its credentials in a file of its own)."""
    doc = yaml.safe_load(state.inventory_file.read_text())
    spec = doc["clusters"][NAME]
    if repl_password is not None:
        lines = (state.path / "credentials.cnf").read_text().splitlines()
        group, out = None, []
        for line in lines:
            group = line.strip()[1:-1] if line.strip().startswith("[") else group
            out.append(f'password="{repl_password}"' if group == "client-repl" and line.startswith("password")
                       else line)
        cnf = state.path / f"{name}.cnf"
        cnf.write_text("\n".join(out) + "\n")
        cnf.chmod(0o600)
        spec["replication_credentials"]["defaults_file"] = cnf.name
    if admin_socket is not None:
        spec["router"]["admin_socket"] = admin_socket
    path = state.path / f"{name}-inventory.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


GOOD_DDL = ["ALTER TABLE app.orders ADD COLUMN early1 VARCHAR(32) NULL", "CREATE INDEX idx_early1 ON app.orders (early1)"]


@pytest.mark.parametrize("wrong, expected", [
    ("replication password", "replication_login"),
    ("router socket", "admin socket"),
    ("DDL", "Unknown data type: 'VARCHR'"),
])
def test_a_swap_that_a_later_phase_would_refuse_is_refused_before_any_change(cluster, cli, wrong, expected):
    """Every check a later phase makes (the switchover's logins and router, the DDL on the live
    schema) runs before the first change: exit 5, and no server, no reader pool changed."""
    state, inv = cluster
    shape_before = {n: create_table(inv, n) for n in SERVERS}
    readers_before = readers(inv)
    params: dict = {"ddl": GOOD_DDL, "candidate": f"{NAME}-2"}
    slug = wrong.replace(" ", "-")
    if wrong == "replication password":
        params["inventory"] = str(inventory_variant(state, slug, repl_password="not-the-password"))
    elif wrong == "router socket":
        params["inventory"] = str(inventory_variant(state, slug, admin_socket=str(state.path / "no-such.sock")))
    else:
        params["ddl"] = ["ALTER TABLE app.orders ADD COLUMN early1 VARCHR(32) NULL"]
    inventory = params.pop("inventory", None)
    pb = playbook(state, params, f"early-{slug}")
    if inventory:
        doc = yaml.safe_load(pb.read_text())
        doc["inventory"] = inventory
        pb.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = cli("run", str(pb), "--yes", "--json", timeout=180)
    assert r.returncode == 5, (r.returncode, r.stdout[-3000:], r.stderr)
    finished = jsonlines.events(r.stdout)[-1]
    assert finished["event"] == "RunFinished" and finished["status"] == "refused", finished
    assert finished["summary"].startswith("refused before any change") and expected in finished["summary"]
    error = next(x for x in jsonlines.records(r.stdout) if x["record"] == "error")
    assert error["exit_code"] == 5 and error["message"] == finished["summary"] and error["hint"]
    assert "error: refused before any change" in r.stderr
    assert not [e for e in jsonlines.events(r.stdout) if e["event"] == "StepStarted"]  # no step ran at all
    assert {n: create_table(inv, n) for n in SERVERS} == shape_before
    assert readers(inv) == readers_before
    for n in SERVERS:  # the scratch copies are gone
        with inv.open(n) as s:
            assert not s.query("SHOW DATABASES LIKE '\\_dbmigrate\\_ddl\\_check'"), n


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
    results = preflight_checks.run_preflight(inv, NAME, f"{NAME}-2", preflight_checks.Limits(max_lag_ms=2000))
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
    results = preflight_checks.run_preflight(inv, NAME, f"{NAME}-1", preflight_checks.Limits(max_lag_ms=2000))
    errant = next(g for g in results if g.name == "errant_gtids")
    assert errant.ok, errant.reason


def test_failed_verification_stops_and_puts_the_side_back(cluster, cli):
    """A DDL applied without undo_ddl is not undone, and every account of the run says so: the
    summary, the hint, the --json error and summary records, and runs show --json."""
    state, inv = cluster
    readers_before = readers(inv)
    primary = kit.writers(kit.shape(inv, NAME))[0]
    sides = [n for n in SERVERS if n != primary]
    pb = playbook(state, {"ddl": ["ALTER TABLE app.orders ADD COLUMN note3 INT NULL"],
                          "verify": [{"table": "app.orders", "index": "no_such_column"}],  # an index: preflight refuses unknown columns
                          "primary": "skip"}, "bad-verify")
    r = cli("run", str(pb), "--yes", "--json", timeout=180)
    assert r.returncode == 1, (r.stdout[-3000:], r.stderr)
    summary = jsonlines.summary(r.stdout)
    assert summary["status"] == "rolled_back", summary
    left = f"not undone (left in place): step 'apply DDL on {sides[0]} (binlog off)' ({sides[0]}: "
    assert f"verification failed on {sides[0]}" in summary["reason"] and "no_such_column" in summary["reason"]
    assert left in summary["reason"] and "ADD COLUMN note3 INT NULL" in summary["reason"], summary["reason"]
    error = next(x for x in jsonlines.records(r.stdout) if x["record"] == "error")
    assert error["exit_code"] == 1 and left in error["message"] and left in error["hint"], error
    assert "NOT" in error["hint"] and not error["hint"].startswith("the completed steps were undone")
    stderr = " ".join(r.stderr.split())
    assert "error: " in stderr and f"hint: {' '.join(error['hint'].split())}" in stderr
    assert readers(inv) == readers_before  # the side is back in the pool
    assert "`note3`" in create_table(inv, sides[0])  # no undo_ddl: the schema stays, and the run says so
    assert "`note3`" not in create_table(inv, sides[1])  # the run stopped before the next side
    assert "`note3`" not in create_table(inv, primary)
    shown = cli("runs", "show", summary["run_id"], "--json")
    assert shown.returncode == 0, shown.stderr
    detail = jsonlines.result(shown.stdout)
    assert [(n["step"], [x["server"] for x in n["left"]]) for n in detail["not_undone"]] == \
        [(f"apply DDL on {sides[0]} (binlog off)", [sides[0]])], detail["not_undone"]
    assert "ADD COLUMN note3 INT NULL" in detail["not_undone"][0]["left"][0]["sql"]
    undos = {s["name"]: s for s in detail["steps"] if s.get("action") == "undo"}
    assert undos[f"apply DDL on {sides[0]} (binlog off)"]["status"] == "not_undone"
    assert undos[f"take {sides[0]} out of the reader pool"]["status"] == "undone"
    human = cli("runs", "show", summary["run_id"])
    assert f"not undone: step apply DDL on {sides[0]} (binlog off) left its change in place" in \
        " ".join(human.stdout.split()), human.stdout


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
        # found by the preflight, before the side leaves the pool
        assert outcome.status == "refused", outcome.summary
        assert outcome.summary.startswith("refused before any change")
        assert "app.fx has index fx_c (c) (it is (k))" in outcome.summary, outcome.summary
        assert "KEY `fx_c` (`k`)" in create_table(inv, sides[0], "app.fx")  # as it was
        for n in (sides[1], primary):
            assert "fx_c" not in create_table(inv, n, "app.fx")
    finally:
        with inv.open(primary) as p:
            p.execute("DROP TABLE IF EXISTS app.fx")


def test_a_side_whose_application_queries_fail_is_kept_out_of_traffic(cluster):
    """DROP INDEX of an index the application names in `USE INDEX (...)`: every gate of the change
    itself passes, but the digest's sample fails with 1176 on the altered side and not on the
    primary, so the side stays out of the reader pool and the run pauses; warned at the start."""
    from dbmigrate.app.runs import rollback_run
    from dbmigrate.digest.model import Digest, QueryClass

    state, inv = cluster
    primary = kit.writers(kit.shape(inv, NAME))[0]
    sides = [n for n in SERVERS if n != primary]
    readers_before = readers(inv)
    with inv.open(primary) as p:
        p.execute("CREATE INDEX ix_hint ON app.orders (amount)")
        pos = Inspector(p).gtid_binlog_pos()
    for n in sides:
        with inv.open(n) as s:
            assert Inspector(s).wait_for_gtid(pos, 10)

    def qc(example: str, count: int) -> QueryClass:
        return QueryClass(checksum=f"C{count}", fingerprint=example.lower(), distillate="SELECT app.orders",
                          count=count, total_time=0.1, avg=0.001, p95=0.002, p99=None, max=0.01, example=example,
                          tables=("app.orders",))

    hot = "SELECT id FROM orders USE INDEX (ix_hint) WHERE amount > 900.5 LIMIT 5"
    Digest(classes=[qc(hot, 361), qc("SELECT COUNT(*) FROM orders WHERE customer_id = 7", 50),
                    qc("UPDATE orders SET note = 'x' WHERE id = 3", 20)],
           query_count=431, total_time=1, avg=0.001, p95=None, p99=None).save(state.path / "app-digest.json")
    pb = playbook(state, {"ddl": ["DROP INDEX ix_hint ON app.orders"],
                          "undo_ddl": ["CREATE INDEX ix_hint ON app.orders (amount)"],
                          "primary": "skip", "replay_digest": "app-digest.json"}, "hint-drop")
    try:
        outcome = start_run(pb, assume_yes=True)
        assert outcome.status == "paused", outcome.summary
        assert f"{sides[0]} is kept out of traffic" in outcome.summary and "1176" in outcome.summary, outcome.summary
        assert "1 of the application's 3 query class(es)" in outcome.summary, outcome.summary
        assert addr(inv, sides[0]) not in readers(inv)  # the altered side did not return
        assert "ix_hint" not in create_table(inv, sides[0])
        with Journal(resolve_journal_path()) as j:
            logs = " | ".join(r["message"] for r in j.run_detail(outcome.run_id)["logs"])
        assert "names index ix_hint in a hint, and the DDL drops it" in logs, logs
        back = rollback_run(outcome.run_id, assume_yes=True)
        assert back.status == "rolled_back", back.summary
        assert readers(inv) == readers_before
        assert "ix_hint" in create_table(inv, sides[0])  # undo_ddl put the index back
    finally:
        with inv.open(primary) as p:
            p.execute("DROP INDEX IF EXISTS ix_hint ON app.orders")
