"""Transactional completion: a job completed in the caller's transaction, fenced on its claim."""

from __future__ import annotations

from psycopg import pq
from psycopg.rows import tuple_row

from drover._db.connections import resolve_connection
from drover._db.errors import translate
from drover._db.queries import query
from drover.context import Lease
from drover.errors import InvalidArgument, LeaseLost

__all__ = ["complete_in_transaction", "transaction_open"]

_OPEN = (
    pq.TransactionStatus.INTRANS,
    pq.TransactionStatus.INERROR,
    pq.TransactionStatus.ACTIVE,
)


def complete_in_transaction(lease: Lease, obj: object) -> None:
    """Complete the claim ``lease`` holds in the transaction behind ``obj``, or raise LeaseLost.

    One UPDATE fenced on ``(id, attempt, state = 'running')``; when it
    matches nothing, a second statement reads why (for the message). Neither
    fails the caller's transaction, so the caller decides: LeaseLost is meant
    to propagate and roll it back.
    """
    if lease.job_id is None:
        raise InvalidArgument(
            "complete_tx needs a job claimed by a drover worker; this Job was built by hand"
        )
    if lease.completed_in_tx:
        raise InvalidArgument(
            f"complete_tx was already called for job {lease.job_id} attempt {lease.attempt}"
        )
    conn = resolve_connection(
        obj, "complete_tx", "or let the handler return and drover completes the job"
    )
    params = {"id": lease.job_id, "attempt": lease.attempt}
    with (
        translate(f"complete job {lease.job_id} in the caller's transaction"),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(query("job_complete_tx"), params)
        if cur.fetchone() is None:
            cur.execute(query("job_current_state"), params)
            found = cur.fetchone()
            state, attempt = (None, None) if found is None else (str(found[0]), int(found[1]))
            raise LeaseLost(lease.job_id, lease.attempt, state, attempt)
    lease.completed_in_tx = True
    lease.tx_connection = conn


def transaction_open(conn: object) -> bool:
    """True while the psycopg connection ``conn`` is inside a transaction (or a statement)."""
    info = getattr(conn, "info", None)
    if info is None or getattr(conn, "closed", True):
        return False
    return info.transaction_status in _OPEN
