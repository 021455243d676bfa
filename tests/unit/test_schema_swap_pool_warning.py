"""The schema swap warns when a scan warm-up reads more than the side's buffer pool holds."""

from __future__ import annotations

from types import SimpleNamespace

from dbmigrate.procedures.schema_swap import sides

MB = 2**20


class FakeInspector:
    def __init__(self, sizes: dict[str, int], pool: int):
        self.sizes, self.pool = sizes, pool

    def table_sizes(self, tables):
        return {t: self.sizes[t] for t in tables}

    def variable(self, name):
        assert name == "innodb_buffer_pool_size"
        return self.pool


def _with(monkeypatch, method: str, sizes: dict[str, int], pool: int) -> SimpleNamespace:
    """A run context holding just the params the check reads."""
    params = SimpleNamespace(warm=SimpleNamespace(method=method), warm_tables=lambda: sorted(sizes))
    monkeypatch.setattr(sides, "server_of", lambda ctx, side: object())
    monkeypatch.setattr(sides, "Inspector", lambda server: FakeInspector(sizes, pool))
    return SimpleNamespace(params=params)


def test_a_scan_of_tables_bigger_than_the_pool_is_warned_about(monkeypatch):
    ctx = _with(monkeypatch, "scan", {"app.orders": 300 * MB, "app.items": 100 * MB}, 128 * MB)
    said = sides.pool_overflow(ctx, "db-2")
    assert said is not None
    assert said.startswith("db-2: the tables to scan (400 MB: app.items, app.orders) exceed its buffer pool (128 MB)")
    assert "warm.tables" in said and "replay" in said


def test_tables_that_fit_or_another_method_are_not_warned_about(monkeypatch):
    assert sides.pool_overflow(_with(monkeypatch, "scan", {"app.orders": 100 * MB}, 128 * MB), "db-2") is None
    assert sides.pool_overflow(_with(monkeypatch, "replay", {"app.orders": 300 * MB}, 128 * MB), "db-2") is None
