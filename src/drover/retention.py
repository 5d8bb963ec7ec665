"""How long finished jobs are kept."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from drover._durations import Duration, to_seconds
from drover.errors import ConfigError
from drover.job import TERMINAL_STATES

__all__ = ["Retention"]


@dataclass(frozen=True, slots=True, init=False)
class Retention:
    """How long ``completed``, ``cancelled`` and ``dead`` jobs stay before they are deleted.

    Each field is a ``timedelta`` or seconds; ``None`` keeps that state
    forever. Defaults: completed and cancelled 24 hours, dead 7 days (long
    enough for an operator to inspect and retry). Deletion happens in batches
    in a background thread of started clients, one client at a time; the age
    is measured from ``finalized_at`` on the database clock.
    """

    completed: timedelta | None
    cancelled: timedelta | None
    dead: timedelta | None

    def __init__(
        self,
        *,
        completed: Duration | None = timedelta(hours=24),
        cancelled: Duration | None = timedelta(hours=24),
        dead: Duration | None = timedelta(days=7),
    ) -> None:
        for name, value in (("completed", completed), ("cancelled", cancelled), ("dead", dead)):
            if value is None:
                object.__setattr__(self, name, None)
                continue
            seconds = to_seconds(value, f"Retention.{name}")
            if seconds < 0:
                raise ConfigError(f"Retention.{name} must not be negative, not {value!r}")
            object.__setattr__(self, name, timedelta(seconds=seconds))

    def by_state(self) -> dict[str, float]:
        """``{state: seconds}`` for the states that are pruned."""
        # One field per terminal state, named after it (tests/db/test_states.py checks).
        spans: dict[str, timedelta | None] = {
            state.value: getattr(self, state.value) for state in TERMINAL_STATES
        }
        return {s: v.total_seconds() for s, v in spans.items() if v is not None}
