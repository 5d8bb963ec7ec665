"""One client's view of database trouble: episodes, their one warning, readiness, backoff.

Every background loop reports each database call's end here (``failed`` or
``ok``). While at least one loop's latest call failed with a transient error
(``drover._db.errors.classify``: the connection, the server's statement or
lock timeout, a conflict), the client is in an *episode*: it is not ready,
and its loops back off. The episode's first failure is logged once at
WARNING with the server's reason; later failures of the episode go to DEBUG
(they are counted in ``drover_database_errors_total``); the end is one INFO
record saying how long it lasted. ADR 0044 records why.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from drover._db.errors import TRANSIENT_KINDS, classify, redact

__all__ = ["WARN_EVERY", "Backoff", "Trouble"]

_clock = time.monotonic
"""The tracker's clock (a module attribute, so tests can drive it)."""

WARN_EVERY = 60.0
"""Seconds between two episode warnings: a flapping database warns once a minute at most."""


@dataclass(slots=True)
class _Failing:
    kind: str
    reason: str
    since: float
    failures: int


def _reason(exc: BaseException) -> str:
    # The first line of the message: the server's words, without libpq's
    # multi-line context; never a password.
    text = str(exc).strip()
    return redact(text.splitlines()[0]) if text else type(exc).__qualname__


class Trouble:
    """The transient database failures of one client's loops, for logs, metrics and readiness.

    Thread-safe: every loop thread reports into it, ``ready`` reads it from
    any thread (a memory read under a lock held for a few assignments).
    ``counted`` is called with ``(service, kind)`` for every failure, so the
    metric counts each one, not each episode.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        counted: Callable[[str, str], None] | None = None,
        warn_every: float = WARN_EVERY,
    ) -> None:
        self._log = logger
        self._counted = counted
        self._warn_every = warn_every
        self._lock = threading.Lock()
        self._failing: dict[str, _Failing] = {}
        self._episode_since: float | None = None
        self._last_warning: float | None = None
        self._quiet_episodes = 0
        self._wakers: dict[str, Callable[[], None]] = {}
        self.episodes = 0
        """Episodes begun (for tests)."""

    def watch(self, service: str, retry_now: Callable[[], None]) -> None:
        """Call ``retry_now`` when another loop succeeds while ``service`` is failing.

        A loop that got through means the database is back (a slot freed, a
        lock released): the others try again now instead of at the end of
        their backoff, so the client turns ready within moments.
        """
        self._wakers[service] = retry_now

    def failed(self, service: str, exc: BaseException) -> bool:
        """Record one failed database call of ``service``; True when it is transient.

        A transient failure opens an episode (or joins the one under way) and
        is logged here; the caller must not log it again. A failure that is
        not transient (``"other"``) is only counted: the caller logs it as
        the bug it probably is.
        """
        kind = classify(exc)
        if self._counted is not None:
            self._counted(service, kind)
        if kind not in TRANSIENT_KINDS:
            return False
        now = _clock()
        reason = _reason(exc)
        warn = quiet = 0
        with self._lock:
            entry = self._failing.get(service)
            if entry is None:
                self._failing[service] = _Failing(kind, reason, now, 1)
            else:
                entry.kind, entry.reason, entry.failures = kind, reason, entry.failures + 1
            if self._episode_since is None:
                self._episode_since = now
                self.episodes += 1
                last = self._last_warning
                if last is None or now - last >= self._warn_every:
                    self._last_warning = now
                    warn, quiet = 1, self._quiet_episodes
                    self._quiet_episodes = 0
                else:
                    self._quiet_episodes += 1
        if warn:
            self._log.warning(
                "database trouble (%s) in %s: %s; backing off, not ready until it passes%s",
                kind.replace("_", " "),
                service,
                reason,
                f" ({quiet} shorter episode(s) since the last warning)" if quiet else "",
                extra={
                    "event": "database_trouble",
                    "service": service,
                    "kind": kind,
                    "reason": reason,
                    "quiet_episodes": quiet,
                },
            )
        else:
            self._log.debug(
                "database trouble (%s) in %s: %s",
                kind,
                service,
                reason,
                extra={"event": "database_trouble_again", "service": service, "kind": kind},
            )
        return True

    def ok(self, service: str) -> None:
        """Record a database call of ``service`` that succeeded; may end the episode."""
        if service not in self._failing:  # unlocked fast path: the common case
            return
        now = _clock()
        with self._lock:
            entry = self._failing.pop(service, None)
            since = self._episode_since
            ended = entry is not None and not self._failing and since is not None
            if ended:
                self._episode_since = None
            still = list(self._failing) if entry is not None else []
        for name in still:
            waker = self._wakers.get(name)
            if waker is not None:
                waker()
        if ended and since is not None:
            self._log.info(
                "database trouble over after %.1fs; %s works again",
                now - since,
                service,
                extra={"event": "database_trouble_over", "seconds": round(now - since, 3)},
            )

    def not_ready(self) -> str | None:
        """Why the client is not ready (the failing loops and their reasons), or None."""
        with self._lock:
            if not self._failing:
                return None
            parts = [f"{name}: {f.reason}" for name, f in sorted(self._failing.items())]
        return "database unavailable: " + "; ".join(parts)

    def failing(self, service: str) -> int:
        """How many calls in a row ``service`` has failed (0 when its last one worked)."""
        entry = self._failing.get(service)
        return entry.failures if entry is not None else 0


class Backoff:
    """Delays after consecutive failures: ``base`` doubling to ``cap``, each with ±20 % jitter.

    The jitter keeps the workers of one fleet from retrying in step when the
    database comes back (or frees a connection slot).
    """

    def __init__(self, base: float, cap: float, rng: random.Random | None = None) -> None:
        self._base = max(base, 0.001)
        self._cap = max(cap, self._base)
        self._rng = rng or random.Random()  # noqa: S311 - spreading retries, not security

    def delay(self, failures: int) -> float:
        """The wait after the ``failures``-th failure in a row (1 for the first)."""
        step = math.ldexp(self._base, min(max(failures - 1, 0), 30))
        jitter: float = self._rng.uniform(0.8, 1.2)
        return min(step, self._cap) * jitter
