"""A running client's statements on its claims, with drover's own features plugged in.

The kernel's runners (``drover._db.kernel``) take the features as
``drover._db.doors.Doors``; these are the same operations with
``drover._db.features.FEATURES``, for the callers that run them on a
connection of their own (``drover.testing``, the engine's store, tests).
Each function is one round trip in the usual case, on a connection the
caller borrowed, and commits through that connection's autocommit or the
pool's context manager.
"""

from __future__ import annotations

from collections.abc import Sequence

from drover._db import Connection, kernel
from drover._db.features import FEATURES, LIMITS_GATE
from drover._db.namespace import DEFAULT, Namespace
from drover._db.sweeps import Sweep
from drover._records import Outcome, Recorded, Renewal
from drover.job import JobRow

__all__ = [
    "job_claim",
    "job_claim_expired",
    "job_claim_limited",
    "job_extend_leases",
    "job_record_outcomes",
]


def job_claim(
    conn: Connection,
    queue: str,
    limit: int,
    lease_seconds: float,
    holder: str | None = None,
    *,
    ns: Namespace = DEFAULT,
) -> list[JobRow]:
    """Claim up to ``limit`` due jobs from ``queue``, sorted by id, for ``holder``."""
    return job_claim_limited(conn, queue, limit, lease_seconds, holder, ns=ns)[0]


def job_claim_limited(
    conn: Connection,
    queue: str,
    limit: int,
    lease_seconds: float,
    holder: str | None = None,
    *,
    expect_limits: bool = False,
    ns: Namespace = DEFAULT,
) -> tuple[list[JobRow], frozenset[int], bool]:
    """Claim as ``job_claim`` does; also the ids claimed under a concurrency limit,
    and whether a gate's claim ran.

    Without a gate on the queue this is the kernel's one statement. When a
    limit gates it, that statement claims nothing and says so, and the claim
    goes through the limited one (ADR 0025). ``expect_limits`` goes straight
    to the limited claim, which is as correct without limits, only slower.
    """
    rows, wakes, via = kernel.claim(
        conn,
        queue,
        limit,
        lease_seconds,
        holder,
        gates=FEATURES.gates,
        via=LIMITS_GATE if expect_limits else None,
        ns=ns,
    )
    return rows, wakes, via is not None


def job_record_outcomes(
    conn: Connection, outcomes: Sequence[Outcome], *, ns: Namespace = DEFAULT
) -> list[Recorded]:
    """Write many outcomes, each fenced on its claim; one result per outcome, in input order."""
    return kernel.record_outcomes(conn, outcomes, doors=FEATURES, ns=ns)


def job_extend_leases(
    conn: Connection,
    held: Sequence[tuple[int, int]],
    lease_seconds: float,
    *,
    ns: Namespace = DEFAULT,
) -> list[Renewal]:
    """Renew the leases of the ``(id, attempt)`` claims still current; one result per claim."""
    return kernel.extend_leases(conn, held, lease_seconds, ns=ns)


def job_claim_expired(
    conn: Connection, limit: int, lease_seconds: float, *, ns: Namespace = DEFAULT
) -> list[JobRow]:
    """Re-lease up to ``limit`` running jobs whose lease expired (attempt unchanged): a full
    sweep, every expired lease read (no floor, ADR 0059)."""
    return kernel.claim_expired(conn, limit, lease_seconds, ns=ns, sweep=Sweep(None))
