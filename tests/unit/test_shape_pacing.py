"""A shape capture's pacing and its sampling of long values, without a server."""

from __future__ import annotations

import pytest

from dbmigrate.db.shape_reader import Measured, ShapeReader
from dbmigrate.shape.capture import column_stats
from dbmigrate.shape.pacing import Pacer


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def test_each_read_is_followed_by_a_pause_that_keeps_reads_to_their_share():
    clock = FakeClock()
    pace = Pacer(0.2, clock=clock, sleep=clock.sleep)
    with pace:
        clock.now += 0.02
    assert clock.slept == [pytest.approx(0.08)]
    seen = []
    for item in pace.each(iter([1, 2])):
        clock.now += 0.01  # the read and the caller's work on it
        seen.append(item)
    assert seen == [1, 2] and clock.slept[1:] == [pytest.approx(0.04), pytest.approx(0.04)]
    assert pace.summary() == {"share": 0.2, "reads": 3, "busy_s": 0.04, "paused_s": 0.16}
    assert pace.busy_s / (pace.busy_s + pace.paused_s) == pytest.approx(0.2)


def test_a_slow_read_pauses_at_most_the_bound_and_share_one_never_pauses():
    clock = FakeClock()
    pace = Pacer(0.2, max_pause_s=2.0, clock=clock, sleep=clock.sleep)
    with pace:
        clock.now += 5
    assert clock.slept == [2.0]
    unpaced = Pacer(1.0, clock=clock, sleep=clock.sleep)
    with unpaced:
        clock.now += 1
    assert clock.slept == [2.0]
    with pytest.raises(ValueError):
        Pacer(0)


def test_long_values_are_summarised_from_their_length_and_checksum_only():
    rows = [(1, Measured(40960, 7)), (2, Measured(100, 7)), (3, None), (4, Measured(100, 9))]
    st = column_stats(["id", "der"], rows)["der"]
    assert st == {"sampled": 4, "null_share": 0.25, "distinct_share": round(3 / 3, 4), "avg_len": round(41160 / 3, 1),
                  "max_len": 40960}
    same = column_stats(["b"], [(Measured(5, 1),), (Measured(5, 1),)])["b"]
    assert same["distinct_share"] == 0.5 and "min" not in same


def test_table_options_come_from_the_create_statement():
    create = ("CREATE TABLE `c` (\n  `id` int NOT NULL,\n  `note` varchar(9) COLLATE latin1_swedish_ci\n"
              ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci\n PARTITION BY RANGE (`id`)\n"
              "(PARTITION `p0` VALUES LESS THAN (10) ENGINE = InnoDB)")
    assert ShapeReader.table_options(create) == {"engine": "InnoDB", "collation": "utf8mb4_general_ci",
                                                 "partitioned": True}
    assert ShapeReader.table_options("CREATE TABLE `t` (`a` int) ENGINE=Aria")["partitioned"] is False
