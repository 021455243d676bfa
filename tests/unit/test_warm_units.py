"""Pure logic of the warm-up: what may be replayed, digests, dump files, ratios, scan SQL."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dbmigrate.db.credentials import Credentials
from dbmigrate.db.connection import Server
from dbmigrate.db.flavor import MARIADB, MYSQL
from dbmigrate.exceptions import UsageError
from dbmigrate.warm import dumpfile
from dbmigrate.warm.copier import LocalCopier
from dbmigrate.warm.digest import DigestClass, load_digest, parse_classes, plan_replay
from dbmigrate.warm.measure import HitRatio, PoolSnapshot, hit_ratio_between
from dbmigrate.warm.readonly import refusal
from dbmigrate.warm.reads import scan_tasks, strip_leading_comments


# -- what may be replayed ----------------------------------------------------------
@pytest.mark.parametrize("sql", [
    "SELECT c FROM sbtest1 WHERE id=5",
    "/* dbmigrate */ SELECT id FROM app.t1 WHERE k BETWEEN 1 AND 9",
    "select * from t where note = 'for update' and x = 'into outfile'",
    "WITH x AS (SELECT id FROM t) SELECT * FROM x",
    "(SELECT 1 FROM t) UNION (SELECT 2 FROM u)",
    "SELECT /*+ MAX_EXECUTION_TIME(100) */ id FROM t",
])
def test_plain_reads_are_replayable(sql):
    assert refusal(sql) is None


@pytest.mark.parametrize("sql,reason", [
    ("UPDATE t SET k=k+1 WHERE id=5", "not a SELECT (UPDATE)"),
    ("SELECT * FROM t WHERE id=1 FOR UPDATE", "locks rows (FOR UPDATE)"),
    ("SELECT * FROM t WHERE id=1 LOCK IN SHARE MODE", "locks rows (shared lock)"),
    ("SELECT * FROM t FOR SHARE", "locks rows (shared lock)"),
    ("SELECT id INTO @x FROM t LIMIT 1", "writes its result somewhere (INTO)"),
    ("SELECT * FROM t INTO OUTFILE '/tmp/x'", "writes its result somewhere (INTO)"),
    ("SELECT SLEEP(10)", "sleeps or burns CPU on purpose"),
    ("SELECT GET_LOCK('a', 1)", "takes user locks"),
    ("SELECT NEXTVAL(s)", "advances a sequence"),
    ("SELECT 1; DROP TABLE t", "more than one statement"),
    ("WITH x AS (SELECT 1) DELETE FROM t", "WITH ... writes rows"),
    ("  ", "empty statement"),
])
def test_everything_else_is_refused_with_a_reason(sql, reason):
    assert refusal(sql) == reason


def test_leading_comments_are_stripped_but_hints_kept():
    assert strip_leading_comments("/* dbmigrate */ /* app:42 */ SELECT 1;") == "SELECT 1"
    assert strip_leading_comments("SELECT /*+ NO_ICP(t) */ 1") == "SELECT /*+ NO_ICP(t) */ 1"


# -- digests -----------------------------------------------------------------------
def _cls(fp, query, tables=(), total="0.5", db="app", count=10):
    return {"fingerprint": fp, "query_count": count, "example": {"query": query, "Query_time": "0.001"},
            "tables": [{"create": f"SHOW CREATE TABLE `{t.split('.')[0]}`.`{t.split('.')[1]}`\\G",
                        "status": "SHOW TABLE STATUS"} for t in tables],
            "metrics": {"Query_time": {"sum": total, "avg": "0.001"}, "db": {"value": db}}}


def test_digest_classes_are_parsed_from_pt_query_digest_json():
    data = {"global": {}, "classes": [_cls("select c from t? where id=?", "SELECT c FROM t1 WHERE id=3",
                                           ["app.t1"], total="1.25")]}
    [c] = parse_classes(data, "digest.json")
    assert c == DigestClass("select c from t? where id=?", "SELECT c FROM t1 WHERE id=3", "app", 10, 1.25, ("app.t1",))


def test_plan_keeps_selects_on_user_tables_heaviest_first_and_says_why_others_are_out():
    classes = parse_classes({"classes": [
        _cls("light", "SELECT 1 FROM app.t2", ["app.t2"], total="0.1"),
        _cls("heavy", "SELECT * FROM app.t1 WHERE k > 3", ["app.t1"], total="9"),
        _cls("write", "UPDATE app.t1 SET k=1", ["app.t1"], total="50"),
        _cls("sys", "SELECT @@version", [], total="3"),
        _cls("dict", "SELECT * FROM mysql.user", ["mysql.user"], total="2"),
    ]}, "x")
    plan = plan_replay(classes, "x")
    assert [c.fingerprint for c in plan.classes] == ["heavy", "light"]
    assert dict(plan.refused) == {"write": "not a SELECT (UPDATE)", "sys": "reads no user table",
                                  "dict": "reads no user table"}
    assert plan.hot_tables() == ["app.t1", "app.t2"]


def test_digest_without_select_classes_is_a_clear_error(tmp_path):
    path = tmp_path / "writes.json"
    path.write_text(json.dumps({"classes": [_cls("w", "INSERT INTO app.t1 VALUES (1)", ["app.t1"]),
                                            _cls("l", "SELECT * FROM app.t1 FOR UPDATE", ["app.t1"])]}))
    with pytest.raises(UsageError) as e:
        plan_replay(load_digest(path), str(path))
    assert "none of its 2 query classes is a replayable SELECT" in e.value.message
    assert "locks rows (FOR UPDATE)" in e.value.message and "not a SELECT (INSERT)" in e.value.message
    assert "--method scan" in e.value.hint


def test_non_digest_json_is_rejected(tmp_path):
    path = tmp_path / "other.json"
    path.write_text('{"hello": 1}')
    with pytest.raises(UsageError, match="not pt-query-digest JSON"):
        load_digest(path)


def test_a_real_slow_log_is_digested(tmp_path):
    log = tmp_path / "slow.log"
    log.write_text(
        "# Time: 241101 10:00:00\n# User@Host: app[app] @  [127.0.0.1]\n# Thread_id: 9  Schema: app  QC_hit: No\n"
        "# Query_time: 0.002000  Lock_time: 0.000000  Rows_sent: 1  Rows_examined: 1\n"
        "use app;\nSET timestamp=1730455200;\nSELECT c FROM t1 WHERE id=42;\n")
    plan = plan_replay(load_digest(log), str(log))
    assert [c.example for c in plan.classes] == ["SELECT c FROM t1 WHERE id=42"]
    assert plan.classes[0].db == "app" and plan.classes[0].tables == ("app.t1",)


# -- dump files and space ids --------------------------------------------------------
def test_innodb_names_are_decoded_and_partitions_fold_into_their_table():
    assert dumpfile.decode_innodb_name("app/order@002dlines") == "app.order-lines"
    assert dumpfile.decode_innodb_name("app/t#P#p0") == "app.t"


def test_space_comparison_keeps_only_pages_of_tables_with_the_same_id():
    dump = dumpfile.parse_dump("5,3\n5,2\n6,1\n0,7\n9,1\ngarbage\n7,4\n")
    source = {"app/t1": 5, "app/t2": 6, "app/gone": 9, "SYS_FOREIGN": 7}
    target = {"app/t1": 5, "app/t2": 8, "SYS_FOREIGN": 7}
    cmp = dumpfile.compare_spaces(dump, source, target)
    assert cmp.matched == {"app.t1": 5}
    assert cmp.differing == {"app.t2": (6, 8)}
    assert cmp.missing_on_target == ["app.gone"]
    assert cmp.unknown_spaces == [0, 7]  # system tablespace and the dictionary are not carried over
    assert dumpfile.keep_matched(dump, cmp) == [(5, 3), (5, 2)]  # LRU order kept
    assert dumpfile.render_dump([(5, 3), (5, 2)]) == "5,3\n5,2\n"


def test_a_matching_id_that_names_another_table_is_not_a_match():
    cmp = dumpfile.compare_spaces([(5, 1)], {"app/t1": 5}, {"app/t1": 6, "app/other": 5})
    assert cmp.matched == {} and cmp.differing == {"app.t1": (5, 6)}


# -- measurement ----------------------------------------------------------------------
def test_hit_ratio_is_a_delta_not_the_lifetime_counters():
    a = PoolSnapshot(100.0, read_requests=1_000_000, reads=10, pages_data=5, pages_free=1, pages_total=6)
    b = PoolSnapshot(102.5, read_requests=1_001_000, reads=310, pages_data=305, pages_free=1, pages_total=6)
    hr = hit_ratio_between(a, b, queries=400)
    assert (hr.read_requests, hr.reads, hr.seconds, hr.queries) == (1000, 300, 2.5, 400)
    assert hr.ratio == pytest.approx(0.7)
    assert HitRatio(0, 0, 1.0).ratio is None


# -- scan statements and flavors ---------------------------------------------------------
def test_scan_reads_the_clustered_index_and_every_secondary_btree():
    idx = [{"name": "PRIMARY", "type": "BTREE"}, {"name": "k_1", "type": "BTREE"}, {"name": "ft", "type": "FULLTEXT"}]
    assert [t.sql for t in scan_tasks("app.t1", idx)] == [
        "SELECT COUNT(*) FROM `app`.`t1` FORCE INDEX (PRIMARY)",
        "SELECT COUNT(*) FROM `app`.`t1` FORCE INDEX (`k_1`)"]


def test_scan_of_a_table_without_primary_key_ignores_secondaries_to_reach_the_clustered_index():
    sqls = [t.sql for t in scan_tasks("app.log", [{"name": "a", "type": "BTREE"}, {"name": "b", "type": "BTREE"}])]
    assert sqls[0] == "SELECT COUNT(*) FROM `app`.`log` IGNORE INDEX (`a`, `b`)"
    assert [t.sql for t in scan_tasks("app.heap", [])] == ["SELECT COUNT(*) FROM `app`.`heap`"]


def test_flavor_sql_for_warm_up():
    assert MARIADB.innodb_tables_sql().endswith("information_schema.INNODB_SYS_TABLES")
    assert MYSQL.innodb_tables_sql().endswith("information_schema.INNODB_TABLES")
    assert MARIADB.with_statement_timeout("SELECT 1", 2.5) == "SET STATEMENT max_statement_time=2.500 FOR SELECT 1"
    assert MYSQL.with_statement_timeout("SELECT id FROM t", 2.5) == "SELECT /*+ MAX_EXECUTION_TIME(2500) */ id FROM t"
    assert "performance_schema.global_status" in MYSQL.global_status_sql(2)
    assert MARIADB.global_status_sql(2).endswith("IN (%s,%s)")


# -- copying --------------------------------------------------------------------------------
def _server(host: str) -> Server:
    return Server("db7", host, 3306, Credentials("u", "p"))


def test_local_copier_refuses_a_server_on_another_host(tmp_path):
    with pytest.raises(UsageError, match="runs on db7.example.net, not on this host"):
        LocalCopier().fetch(_server("db7.example.net"), "/var/lib/mysql/ib_buffer_pool", tmp_path)


def test_local_copier_installs_the_file_atomically(tmp_path):
    src = tmp_path / "filtered"
    src.write_text("5,1\n")
    datadir = tmp_path / "data"
    datadir.mkdir()
    (datadir / "ib_buffer_pool").write_text("old\n")
    LocalCopier().push(src, _server("127.0.0.1"), str(datadir / "ib_buffer_pool"))
    assert (datadir / "ib_buffer_pool").read_text() == "5,1\n"
    assert sorted(os.listdir(datadir)) == ["ib_buffer_pool"]  # no temp file left behind
    assert LocalCopier().fetch(_server("127.0.0.1"), str(datadir / "ib_buffer_pool"), tmp_path) == \
        Path(datadir / "ib_buffer_pool")
