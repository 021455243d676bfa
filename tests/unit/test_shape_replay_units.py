"""A captured shape turned into rows and replayed statements: pure parts."""

from __future__ import annotations

import datetime
import json

import pytest

from dbmigrate.db.shape_writer import grant_for_any_host
from dbmigrate.exceptions import UsageError
from dbmigrate.shape.files import read_shape
from dbmigrate.shape.generate import Column, ValueSource, enum_values, foreign_keys, scaled_rows
from dbmigrate.shape.replay_plan import plan


def col(name, data_type, column_type=None, nullable="NO", max_len=None, extra="", key=""):
    return Column.from_catalog({"name": name, "data_type": data_type, "column_type": column_type or data_type,
                                "nullable": nullable, "max_len": max_len, "scale": None, "extra": extra, "key": key})


def test_a_sample_becomes_a_prepared_statement_with_its_parameters_tied_to_columns():
    p = plan("SELECT id FROM ca.orders USE INDEX (ix_status_created) WHERE status = '?' ORDER BY created LIMIT 0")
    assert p.sql == "SELECT id FROM ca.orders USE INDEX (ix_status_created) WHERE status = ? ORDER BY created LIMIT 10"
    assert [(x.column, x.inserted) for x in p.parameters] == [("status", False)] and not p.writes
    p = plan("INSERT INTO `ca`.`orders` (account_id, status, created) VALUES (0, '?', NOW(6))")
    assert p.sql == "INSERT INTO `ca`.`orders` (account_id, status, created) VALUES (?, ?, NOW(6))" and p.writes
    assert [(x.column, x.table, x.inserted) for x in p.parameters] == [("account_id", "ca.orders", True),
                                                                        ("status", "ca.orders", True)]
    p = plan("INSERT INTO ca.audit_log VALUES (NOW(6), '?', '?')")
    assert [(x.position, x.table) for x in p.parameters] == [(1, "ca.audit_log"), (2, "ca.audit_log")]
    p = plan("UPDATE t SET a = 'x' WHERE b IN (1, 2) AND c BETWEEN 3 AND 4 LIMIT 5, 6")
    assert p.sql == "UPDATE t SET a = ? WHERE b IN (?, ?) AND c BETWEEN ? AND ? LIMIT 5, 6"
    assert [x.column for x in p.parameters] == ["a", "b", "b", "c", "c"]


def test_generated_rows_follow_types_statistics_and_foreign_keys():
    cols = [col("id", "bigint", extra="auto_increment", key="PRI"), col("account_id", "int"),
            col("status", "enum", "enum('pending','valid')"), col("issued", "date"),
            col("serial", "varchar", max_len=64), col("der", "mediumblob", max_len=16777215),
            col("note", "varchar", nullable="YES", max_len=10)]
    stats = {"issued": {"min": "2024-05-01", "max": "2024-06-01"}, "der": {"avg_len": 2048},
             "note": {"null_share": 1.0}, "serial": {"avg_len": 4, "distinct_share": 0.1}}
    src = ValueSource("ca.orders", cols, stats=stats, rows=50, parents={"account_id": 20})
    assert [c.name for c in src.loaded_columns] == ["account_id", "status", "issued", "serial", "der", "note"]
    rows = [src.row() for _ in range(50)]
    assert all(1 <= r[0] <= 20 for r in rows) and {r[1] for r in rows} <= {"pending", "valid"}
    assert all(datetime.date(2024, 5, 1) <= r[2] <= datetime.date(2024, 6, 1) for r in rows)
    assert len({r[3] for r in rows}) <= 5  # few distinct values, like the sample
    assert all(isinstance(r[4], bytes) and 1500 < len(r[4]) < 2600 for r in rows) and all(r[5] is None for r in rows)
    assert 1 <= src.parameter("id") <= 50  # a lookup by the server-filled key finds a generated row
    assert scaled_rows(3002, 0.01) == 31 and scaled_rows(1, 0.001) == 1 and scaled_rows(0, 1) == 0
    assert enum_values("enum('a','it''s')") == ["a", "it's"]
    assert foreign_keys("CONSTRAINT `f` FOREIGN KEY (`account_id`) REFERENCES `accounts` (`id`)") == \
        {"account_id": "accounts"}


def test_unique_columns_get_distinct_values_and_an_ungeneratable_column_is_refused():
    src = ValueSource("t.u", [col("code", "varchar", max_len=20, key="UNI"), col("n", "int", key="UNI")], rows=200)
    rows = [src.row() for _ in range(200)]
    assert len({r[0] for r in rows}) == 200 and len({r[1] for r in rows}) == 200
    with pytest.raises(UsageError, match="NOT NULL column g of type point"):
        ValueSource("t.g", [col("g", "point")], rows=1)


def test_captured_grants_are_replayed_for_any_host_without_secrets_and_roles():
    assert grant_for_any_host("GRANT SELECT (`id`, `status`) ON `ca`.`orders` TO `ca_ocsp`@`10.0.%`", "ca_ocsp") == \
        "GRANT SELECT (`id`, `status`) ON `ca`.`orders` TO `ca_ocsp`@'%'"
    assert grant_for_any_host("GRANT USAGE ON *.* TO `a`@`%` IDENTIFIED BY PASSWORD '<redacted>'", "a") is None
    assert grant_for_any_host("GRANT SELECT ON *.* TO `a`@`%` IDENTIFIED BY PASSWORD '<redacted>' WITH GRANT OPTION",
                              "a") == "GRANT SELECT ON *.* TO `a`@'%' WITH GRANT OPTION"
    assert grant_for_any_host("GRANT `reader` TO `a`@`%`", "a") is None


def test_a_shape_directory_is_checked_before_anything_is_built(tmp_path):
    with pytest.raises(UsageError, match="holds no shape.json"):
        read_shape(tmp_path)
    (tmp_path / "shape.json").write_text(json.dumps({"format": "dbmigrate.shape/1", "schemas": {"ca": {}}}))
    with pytest.raises(UsageError, match="no digest.json"):
        read_shape(tmp_path)
    (tmp_path / "shape.json").write_text("{}")
    with pytest.raises(UsageError, match="not a shape written by"):
        read_shape(tmp_path)


def test_a_performance_schema_window_is_the_difference_of_the_digest_counters():
    from dbmigrate.digest.statement_window import digest_between, tables_of

    text = "SELECT ID , `account_id` FROM `ca` . `orders` USE INDEX ( `ix_status_created` ) WHERE STATUS = ? LIMIT ?"
    row = {"digest": "abc", "digest_text": text, "n": 130, "sum_ps": 2_000_000_000, "max_ps": 9_000_000,
           "rows_examined": 1300}
    own = {"digest": "def", "digest_text": "SELECT * FROM performance_schema . threads", "n": 5, "sum_ps": 1,
           "max_ps": 1, "rows_examined": 0}
    before = {("ca", "abc"): {**row, "n": 30, "sum_ps": 1_000_000_000, "rows_examined": 300}}
    d = digest_between(before, {("ca", "abc"): row, ("", "def"): own},
                       {"abc": ("ca_app", "SELECT id FROM ca.orders WHERE status = 'pending'")}, 2.0, {})
    (qc,) = d.classes  # the window's own reads are not the application's
    assert qc.count == 100 and abs(qc.total_time - 0.001) < 1e-9 and qc.rows_examined_avg == 10
    assert qc.user == "ca_app" and qc.example.startswith("SELECT id FROM ca.orders") and d.rate(qc.count) == 50
    assert tables_of(text, "ca") == ("`ca`.`orders`",) and tables_of("UPDATE t SET a = ?", "x") == ("`x`.`t`",)
    p = plan(text)
    assert p.sql.endswith("FROM `ca`.`orders` USE INDEX ( `ix_status_created` ) WHERE STATUS = ? LIMIT 10")
    assert [x.column for x in p.parameters] == ["STATUS"]
    p = plan("INSERT INTO `ca` . `orders` ( `account_id` , `status` ) VALUES (...)")
    assert p.sql == "INSERT INTO `ca`.`orders` ( `account_id` , `status` ) VALUES (?, ?)"
    assert [x.column for x in p.parameters] == ["account_id", "status"]
