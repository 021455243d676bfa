"""A warm-up that leaves its target colder than it found it says so."""

from __future__ import annotations


def test_a_warm_up_that_lowers_the_hit_ratio_says_so():
    from dbmigrate.warm.measure import HitRatio, PoolSnapshot
    from dbmigrate.warm.methods import WarmResult

    snap = PoolSnapshot(0, 100, 10, 50, 10, 60)

    def result(before: float, after: float) -> WarmResult:
        return WarmResult("dump-load", "db-2", "db-1", 1.0, ["app.t"], snap, snap,
                          HitRatio(1000, round((1 - before) * 1000), 1.0),
                          HitRatio(1000, round((1 - after) * 1000), 1.0))

    assert result(0.846, 0.722).lowered and "LOWER than before" in result(0.846, 0.722).sentence()
    assert not result(0.80, 0.99).lowered and "LOWER" not in result(0.80, 0.99).sentence()
