"""When a failed job runs again: the retry policy seam and the default backoff."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

from drover.errors import InvalidArgument
from drover.job import JobRow

__all__ = ["ExponentialRetryPolicy", "RetryPolicy"]


@runtime_checkable
class RetryPolicy(Protocol):
    """Decides when a failed job becomes claimable again.

    ``next_retry`` receives the row of the attempt that just failed (its
    ``attempt`` is 1 after the first failure) and returns an absolute,
    timezone-aware time. It is called from pool threads and the rescuer at the
    same time, so it must be thread-safe. A time in the past means now. If it
    raises or returns something that is not an aware datetime, drover logs the
    problem and falls back to ``ExponentialRetryPolicy``.
    """

    def next_retry(self, job: JobRow) -> datetime:
        """The time at which ``job`` may run again."""
        ...


class ExponentialRetryPolicy:
    """``attempt⁴`` seconds from now, spread ±10 % so failed batches do not retry in lockstep.

    About 1 s, 16 s, 81 s, 4.3 min, 10 min, … ; attempt 10 waits ≈ 2.8 h and
    attempt 24 ≈ 3.8 days, so a job failing 25 times is dead after about three
    weeks. Thread-safe.
    """

    def __init__(self, *, jitter: float = 0.1, rng: random.Random | None = None) -> None:
        if not 0 <= jitter < 1:
            raise InvalidArgument(f"jitter must be in [0, 1), not {jitter}")
        self._jitter = jitter
        self._rng = rng or random.Random()  # noqa: S311 - spreading retries, not security

    def backoff(self, attempt: int) -> timedelta:
        """The wait after failed attempt number ``attempt`` (at least 1)."""
        base = float(max(1, attempt)) ** 4
        factor = 1.0 + self._jitter * (2.0 * self._rng.random() - 1.0)
        return timedelta(seconds=base * factor)

    def next_retry(self, job: JobRow) -> datetime:
        """Now plus ``backoff`` for the attempt that failed."""
        return datetime.now(UTC) + self.backoff(job.attempt)
