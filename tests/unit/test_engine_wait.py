"""Bounded waits on a fake clock."""

from __future__ import annotations

import pytest

from dbmigrate.engine import FakeClock, retry, throttle, wait_until
from dbmigrate.clock import RetryExhausted
from dbmigrate.exceptions import WaitTimeout


def test_wait_until_returns_the_truthy_value():
    clock = FakeClock()
    values = iter([0, 0, 42])
    assert wait_until(lambda: next(values), timeout=5, interval=1, what="x", clock=clock) == 42
    assert clock.sleeps == [1, 1]


def test_wait_until_timeout_names_what_and_the_bound_and_checks_at_the_deadline():
    clock = FakeClock()
    calls = []
    with pytest.raises(WaitTimeout) as timeout:
        wait_until(lambda: calls.append(1), timeout=2.5, interval=1, what="replica db-2 to catch up", clock=clock)
    assert timeout.value.message == "timed out after 2.5s waiting for replica db-2 to catch up"
    assert clock.sleeps == [1, 1, 0.5] and len(calls) == 4


def test_retry_retries_only_listed_errors_then_gives_up_with_the_cause():
    clock = FakeClock()
    attempts = []

    def flaky():
        attempts.append(1)
        raise ConnectionError("gone away")

    with pytest.raises(RetryExhausted) as exhausted:
        retry(flaky, attempts=3, delay=0.5, backoff=2, what="reconnect to db-1", retry_on=(ConnectionError,),
              clock=clock)
    assert exhausted.value.message == "gave up on reconnect to db-1 after 3 attempts: gone away"
    assert isinstance(exhausted.value.__cause__, ConnectionError)
    assert clock.sleeps == [0.5, 1.0] and len(attempts) == 3

    def wrong():
        raise ValueError("bug")

    with pytest.raises(ValueError):
        retry(wrong, attempts=3, delay=1, what="x", retry_on=(ConnectionError,), clock=clock)


def test_retry_returns_first_success():
    results = iter([ConnectionError("once"), "ok"])

    def fn():
        value = next(results)
        if isinstance(value, Exception):
            raise value
        return value

    assert retry(fn, attempts=2, delay=0, what="x", clock=FakeClock()) == "ok"


def test_throttle_pauses_until_clear_and_reports_time_paused():
    clock = FakeClock()
    lag = iter([7.0, 6.0, 2.0])
    pauses = []
    paused = throttle(lambda: (v := next(lag)) > 5 and f"lag {v}s", max_wait=10, interval=1, what="replica lag",
                      clock=clock, on_pause=lambda reason, waited: pauses.append(reason))
    assert paused == 2 and pauses == ["lag 7.0s", "lag 6.0s"]


def test_throttle_is_bounded():
    with pytest.raises(WaitTimeout, match=r"throttled for 3s on replica lag and still paused \(lag 9s\)"):
        throttle(lambda: "lag 9s", max_wait=3, interval=1, what="replica lag", clock=FakeClock())
