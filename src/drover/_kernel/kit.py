"""What the kernel's services are built from, and the doors features attach at (ADR 0045).

``Settings`` are the kernel's numbers (no ``Config``: the kernel knows no
feature's options). ``Events`` is what the kernel reports as it works; the
client's metrics implement it, ``QUIET`` ignores it. ``Hooks`` are the
doors: lists of callables a feature appends to, empty by default, so a
feature nobody configured costs nothing but the test of an empty list.
``Kit`` bundles one started kernel's parts, so every service takes one
argument.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from drover._kernel.claims import Claim, InFlight, Slots
from drover._kernel.store import KernelStore
from drover._records import Recorded
from drover.retry import ExponentialRetryPolicy, RetryPolicy

__all__ = ["QUIET", "Events", "Hooks", "Kit", "Settings", "holder_of"]


def holder_of(client_id: str) -> str:
    """``"<client id> (pid <pid> on <host>)"``: how claims (``leased_by``) and the duplicate
    ledger name a client. Read at the call, so a forked process names itself."""
    return f"{client_id} (pid {os.getpid()} on {socket.gethostname()})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The kernel's numbers: how many jobs at once, from which queues, and its intervals."""

    concurrency: int = 10
    weights: Mapping[str, int] = field(default_factory=lambda: {"default": 1})
    """Queue name -> weight: how often a queue is tried first in a claim round."""
    caps: Mapping[str, int] = field(default_factory=dict)
    """Queue name -> the most of its jobs this client runs at once (``max_workers``)."""
    poll_interval: float = 1.0
    lease_seconds: float = 60.0
    heartbeat_interval: float = 20.0
    rescue_interval: float = 60.0
    retry_policy: RetryPolicy = field(default_factory=ExponentialRetryPolicy)
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("drover"))
    log_tracebacks: bool = True


class Events(Protocol):
    """What the kernel reports as it works (the client's metrics implement it)."""

    def lease_lost(self) -> None: ...
    def write_refused(self, reason: str) -> None: ...
    def stale_write_refused(self, reason: str, write: str) -> None: ...
    def rerun(self, reason: str) -> None: ...
    def service_died(self, service: str) -> None: ...
    def database_error(self, service: str, kind: str) -> None: ...


class _Quiet:
    """``Events`` that records nothing."""

    def lease_lost(self) -> None:
        pass

    def write_refused(self, reason: str) -> None:
        pass

    def stale_write_refused(self, reason: str, write: str) -> None:
        pass

    def rerun(self, reason: str) -> None:
        pass

    def service_died(self, service: str) -> None:
        pass

    def database_error(self, service: str, kind: str) -> None:
        pass


QUIET: Events = _Quiet()


@dataclass(frozen=True, slots=True)
class StaleWrite:
    """A write of this client's that the fence refused, or a claim it lost: the ledger's input."""

    job_id: int
    attempt: int
    write: str
    """complete, fail, snooze, cancel, heartbeat, progress (``drover.ledger``'s words)."""
    refused: str
    """Why: lease lost, not running, not found."""
    state: str | None = None
    state_attempt: int | None = None


@dataclass(slots=True)
class Hooks:
    """The doors of the kernel. Each list is empty unless a feature attached to it.

    Every hook runs on the kernel thread named and must not block for long;
    an exception from one is logged and does not stop the kernel.

    - ``before_write``: the completer's thread, before each batch of outcomes
      is written (a feature writes what must land first: the last progress
      reports).
    - ``written``: the completer's, the rescuer's or the stopping thread, with
      the results of every outcome write (applied or refused).
    - ``stale``: the thread that learned of them, with the writes the fence
      refused and the claims lost (the duplicate ledger).
    - ``capacity_freed``: the completer's thread, with the queues and the
      kinds of written claims that ``wakes`` (wakes fetchers here and
      elsewhere, in any queue a limit of those kinds holds jobs back in).
    - ``claimed``: the fetcher's thread, with a round's claims before they
      run (``Claim.set_feature``).
    - ``before_hand_back``: the stopping thread, with the ids about to be
      handed back, before the write (``drover worker`` locks them, ADR 0053).
    """

    before_write: list[Callable[[], None]] = field(default_factory=list)
    written: list[Callable[[Sequence[Recorded]], None]] = field(default_factory=list)
    stale: list[Callable[[Sequence[StaleWrite]], None]] = field(default_factory=list)
    capacity_freed: list[Callable[[set[str], set[str]], None]] = field(default_factory=list)
    claimed: list[Callable[[list[Claim]], None]] = field(default_factory=list)
    before_hand_back: list[Callable[[list[int]], None]] = field(default_factory=list)


def run_hooks(log: logging.Logger, hooks: Sequence[Callable[..., None]], *args: Any) -> None:
    """Call each hook with ``args``; log (WARNING) and go on when one raises."""
    for hook in hooks:
        try:
            hook(*args)
        except Exception:
            log.warning("a kernel hook failed: %r", hook, exc_info=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Kit:
    """One kernel's shared parts: its store, settings, claims, slots, events and hooks."""

    store: KernelStore
    settings: Settings
    inflight: InFlight
    slots: Slots
    client_id: str
    events: Events = QUIET
    hooks: Hooks = field(default_factory=Hooks)
    context_args: Mapping[str, Any] | None = None
    """Passed to every claim's ``drover.context.Execution`` (what features reach from the
    handler's side: ``read_parents``, ``progress_sink``)."""

    @property
    def log(self) -> logging.Logger:
        return self.settings.logger

    @property
    def holder(self) -> str:
        """How claims and the duplicate ledger name this client (``holder_of``)."""
        return holder_of(self.client_id)

    @property
    def lease_seconds(self) -> float:
        return self.settings.lease_seconds
