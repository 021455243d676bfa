"""The clock and bounded waiting: wait_until, retry and throttle. A leaf every layer may use.

Every wait has a bound and names what it waited for, so a timeout at 3 a.m.
reads as "timed out after 30s waiting for replica db-2 to apply GTID ...",
not as a hang. Pass a FakeClock in tests to make waits instant.
"""

from __future__ import annotations

import time
from typing import Any, Callable, TypeVar

from dbmigrate.exceptions import DbmigrateError, WaitTimeout

T = TypeVar("T")


class Clock:
    """Real time. monotonic() for durations and deadlines, now() for wall-clock stamps."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock(Clock):
    """Time that only moves when someone sleeps or calls advance()."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._t = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self._t

    def now(self) -> float:
        return self._t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self._t += max(seconds, 0.0)


class RetryExhausted(DbmigrateError):
    """All attempts of a retried operation failed; the last error is the cause."""


def wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float,
    what: str,
    interval: float = 0.5,
    clock: Clock | None = None,
) -> T:
    """Poll predicate until it returns something truthy; return that value.

    The predicate is always evaluated at least once and once more at the
    deadline, so a condition that becomes true exactly at the bound is seen.
    """
    clock = clock or Clock()
    deadline = clock.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            raise WaitTimeout(
                f"timed out after {timeout:g}s waiting for {what}",
                hint="check the condition by hand, then resume the run or raise the timeout in the playbook",
            )
        clock.sleep(min(interval, remaining))


def retry(
    fn: Callable[[], T],
    *,
    attempts: int,
    delay: float,
    what: str,
    retry_on: tuple[type[BaseException], ...] = (Exception,),
    backoff: float = 1.0,
    clock: Clock | None = None,
    on_retry: Callable[[int, BaseException], Any] | None = None,
) -> T:
    """Call fn up to `attempts` times, sleeping `delay` (times backoff^n) between tries.

    Only exceptions in retry_on are retried; anything else propagates at once,
    because retrying an unexpected error only hides it.
    """
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    clock = clock or Clock()
    pause = delay
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except retry_on as exc:
            if attempt == attempts:
                raise RetryExhausted(f"gave up on {what} after {attempts} attempts: {exc}") from exc
            if on_retry is not None:
                on_retry(attempt, exc)
            clock.sleep(pause)
            pause *= backoff
    raise AssertionError("unreachable")  # the loop either returns or raises


def throttle(
    should_pause: Callable[[], Any],
    *,
    max_wait: float,
    what: str,
    interval: float = 0.5,
    clock: Clock | None = None,
    on_pause: Callable[[Any, float], Any] | None = None,
) -> float:
    """Hold back while should_pause() is truthy (gh-ost style); return seconds spent paused.

    should_pause may return a reason string ("lag 7.2s > 5s") which is passed
    to on_pause and named in the timeout message.
    """
    clock = clock or Clock()
    started = clock.monotonic()
    while True:
        reason = should_pause()
        waited = clock.monotonic() - started
        if not reason:
            return waited
        if waited >= max_wait:
            detail = f" ({reason})" if isinstance(reason, str) else ""
            raise WaitTimeout(
                f"throttled for {max_wait:g}s on {what} and still paused{detail}",
                hint="the condition did not clear in time; investigate it, then resume the run",
            )
        if on_pause is not None:
            on_pause(reason, waited)
        clock.sleep(min(interval, max_wait - waited))
