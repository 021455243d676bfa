"""Reading transactions from a binlog event stream (python-mysql-replication's event types,
faked by name): one transaction per GTID with its tables, row counts, a few row images and
the statement; rows of transactions not asked for are never decoded; errant GTIDs of an
origin are all found, from the newest file that begins before the first of them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dbmigrate.db.binlog import BinlogReadError, BinlogReader, errant_floor, errant_matcher, first_file_holding
from dbmigrate.db.flavor import MARIADB


def event(kind: str, **attrs):
    return type(kind, (), attrs)()


def gtid(g: str):
    return event("MariadbGtidEvent", gtid=g)


class Rows:
    """A rows event whose rows are decoded on first access (as the library's)."""

    def __init__(self, kind: str, table: str, rows: list[dict], decoded: list[str]):
        self.cls = type(kind, (), {"schema": table.split(".")[0], "table": table.split(".")[1],
                                   "rows": property(lambda _self: decoded.append(table) or rows)})

    def __call__(self):
        return self.cls()


def reader(events: list, timeout_s: float = 5.0, fail: Exception | None = None):
    seen_kw = {}

    def factory(**kw):
        seen_kw.update(kw)
        if fail is not None:
            raise fail
        return _Stream(events)

    server = SimpleNamespace(name="db1", flavor=MARIADB)
    return BinlogReader(server, timeout_s, stream_factory=factory), seen_kw


class _Stream:
    def __init__(self, events):
        self.events = events

    def __iter__(self):
        return iter(self.events)

    def close(self):
        pass


def test_transactions_after_a_position_with_tables_rows_and_statement():
    decoded: list[str] = []
    events = [gtid("0-1-10"), Rows("WriteRowsEvent", "shop.orders", [{"values": {"id": 1}}], decoded)(),
              gtid("0-1-11"), event("MariadbAnnotateRowsEvent", sql_statement="UPDATE shop.orders SET a = 2"),
              Rows("UpdateRowsEvent", "shop.orders", [{"before_values": {"a": 1}, "after_values": {"a": 2}}] * 5,
                   decoded)(),
              event("XidEvent"),
              gtid("0-1-12"), event("QueryEvent", query="ALTER TABLE shop.orders ADD c INT", slave_proxy_id=77)]
    r, kw = reader(events)

    found = r.after("0-1-10", MARIADB.includes)

    assert kw["auto_position"] == "0-1-10"
    assert [t.gtid for t in found] == ["0-1-11", "0-1-12"]
    upd, ddl = found
    assert upd.tables["shop.orders"].updated == 5 and len(upd.tables["shop.orders"].rows) == 3
    assert upd.describe() == ("0-1-11: shop.orders: 5 updated (by 'UPDATE shop.orders SET a = 2'); "
                              "account not in the binlog")
    assert ddl.session_id == 77 and ddl.describe().startswith("0-1-12: no row (a statement: ALTER TABLE")
    assert decoded == ["shop.orders"]  # only the asked-for transaction's rows were decoded


def test_a_stream_that_cannot_start_says_what_the_account_needs():
    r, _ = reader([], fail=RuntimeError("(1227, 'Access denied; you need the REPLICATION SLAVE privilege')"))
    with pytest.raises(BinlogReadError) as failed:
        r.after("0-1-1", MARIADB.includes)
    assert "cannot read db1's binlog" in failed.value.message and "REPLICATION SLAVE" in failed.value.hint


def test_every_errant_gtid_of_an_origin_is_matched_not_only_the_last():
    # The source has 0-5-3 of server 5 (an old, accepted write); the candidate wrote 0-5-41 and 0-5-44 since.
    match = errant_matcher(["0-5-44"], "0-1-50,0-5-3")
    assert [g for g in ("0-5-3", "0-5-41", "0-1-42", "0-5-44", "0-5-45") if match(g)] == ["0-5-41", "0-5-44"]
    assert errant_floor(["0-5-44"], "0-1-50,0-5-3") == {(0, 5): 3}
    assert errant_floor(["0-7-9"], "0-1-50") == {(0, 7): -1}


def test_the_scan_starts_at_the_newest_file_that_begins_before_the_first_errant_gtid():
    files = [("bin.000001", ""), ("bin.000002", "0-1-20"), ("bin.000003", "0-1-40,0-5-41"), ("bin.000004", "0-1-60,0-5-44")]
    assert first_file_holding(files, {(0, 5): 3}) == "bin.000002"  # 000003 begins after 0-5-41
    assert first_file_holding(files, {(0, 5): 41}) == "bin.000003"
    assert first_file_holding([("bin.000009", "0-5-41")], {(0, 5): 3}) == ""  # older files purged: from the oldest
