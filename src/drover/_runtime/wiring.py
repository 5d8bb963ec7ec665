"""What the services of one started client are built from: one bundle, not a dozen arguments."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from drover._db.store import Store
from drover._kernel.claims import InFlight, Slots
from drover._kernel.kit import holder_of
from drover.config import Config
from drover.ops.metrics import Metrics

__all__ = ["Wiring"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Wiring:
    """The shared parts of a started client: its store, configuration, claims, slots and metrics.

    Every service takes the bundle and reads what it needs, so adding a
    dependency to one service changes that service only.
    """

    store: Store
    config: Config
    inflight: InFlight
    slots: Slots
    metrics: Metrics
    client_id: str

    @property
    def log(self) -> logging.Logger:
        return self.config.logger

    @property
    def holder(self) -> str:
        """How claims and the duplicate ledger name this client (``holder_of``)."""
        return holder_of(self.client_id)

    @property
    def lease_seconds(self) -> float:
        """``Config.lease_duration`` in seconds: how long a claim holds without a renewal."""
        return self.config.lease_duration.total_seconds()
