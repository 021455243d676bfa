"""A performance_schema window says how many prepared-statement executions it could not see."""

from __future__ import annotations

from dbmigrate.digest.statement_window import capture_statement_window
from dbmigrate.clock import FakeClock


class CountingServer:
    """Answers the window's reads; the counters move while the window sleeps."""

    name, address = "db1", "127.0.0.1:3306"

    def __init__(self, executes_during: int):
        self.executes, self.executes_during, self.n = 1000, executes_during, 10

    def scalar(self, sql: str):
        assert "statement/com/Execute" in sql
        return self.executes

    def query(self, sql: str):
        if "setup_consumers" in sql:
            return []
        assert "events_statements_summary_by_digest" in sql
        return [{"schema_name": "app", "digest": "d1", "digest_text": "UPDATE `t` SET `v` = ? WHERE `id` = ?",
                 "n": self.n, "sum_ps": self.n * 1_000_000, "max_ps": 2_000_000, "rows_examined": self.n}]

    def window_passes(self):
        self.executes += self.executes_during
        self.n += 40


def _window(tmp_path, executes_during):
    server, clock = CountingServer(executes_during), FakeClock()
    sleep = clock.sleep

    def sleep_and_count(seconds):
        server.window_passes()
        sleep(seconds)

    clock.sleep = sleep_and_count
    said = []
    return capture_statement_window(server, 5, tmp_path / "w.json", clock=clock, progress=said.append), said


def test_prepared_executions_outside_the_digests_are_counted_and_said(tmp_path):
    window, said = _window(tmp_path, executes_during=750)
    assert window.digest.query_count == 40
    assert window.unseen_prepared == 750
    assert "NOT SEEN: 750 execution(s) of server-side prepared statements" in window.sentence()
    assert any("NOT SEEN: 750" in line for line in said)


def test_a_window_without_prepared_executions_says_nothing_of_them(tmp_path):
    window, said = _window(tmp_path, executes_during=0)
    assert window.unseen_prepared == 0
    assert "NOT SEEN" not in window.sentence() and not any("NOT SEEN" in line for line in said)
