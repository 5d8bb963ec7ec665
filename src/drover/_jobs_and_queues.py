"""Reading a job by id and switching queues: one implementation for the Client and the Inspector."""

from __future__ import annotations

from typing import Any

from drover._db.store import Store
from drover.errors import NotFound
from drover.job import JobRow, check_job_id
from drover.queues import QueueState, check_queue_name

__all__ = ["JobsAndQueues"]


class JobsAndQueues:
    """``get_job``, ``get_result``, ``pause_queue``, ``resume_queue`` and ``queue_states``
    over a ``Store``.

    A base class of ``drover.Client`` and ``drover.Inspector``, so
    both check their arguments and answer alike. Thread-safe: each call
    borrows one pool connection for its statement.
    """

    _store: Store

    def get_job(self, job_id: int) -> JobRow:
        """The job's current row, read now (a snapshot; it does not follow the job).

        Raises:
            drover.NotFound: no job has that id (it never existed, or retention
                deleted it).
            drover.InvalidArgument: ``job_id`` is not an int in 1..2**63-1.
            drover.DatabaseError: the database refused or could not be reached.
        """
        checked = check_job_id(job_id)
        row = self._store.get_job(checked)
        if row is None:
            raise NotFound(f"job {checked} does not exist")
        return row

    def get_result(self, job_id: int) -> Any:
        """The result stored for the job, read now, without waiting (``None``: none yet).

        A job has a result once it completed and its handler returned
        something other than ``None`` (parsed JSON: a model comes back as a
        dict). To wait for a job's end, use ``Client.result``.

        Raises:
            drover.NotFound: no job has that id.
            drover.InvalidArgument: ``job_id`` is not an int in 1..2**63-1.
            drover.DatabaseError: the database refused or could not be reached.
        """
        checked = check_job_id(job_id)
        found = self._store.job_result(checked)
        if found is None:
            raise NotFound(f"job {checked} does not exist")
        return found.result

    def pause_queue(self, name: str) -> QueueState:
        """Stop every client from claiming jobs from ``name``, until ``resume_queue``.

        Persisted in the database (``drover_queues``), so it applies to all
        clients on this database, including ones started later, from their next
        claim (within one poll interval). Jobs already running finish normally;
        inserts into a paused queue are accepted and wait. Idempotent: pausing
        a paused queue keeps its first ``paused_at``. Returns the queue's state.

        Raises:
            drover.InvalidInsertOpts: ``name`` is not a valid queue name.
        """
        return self._store.pause_queue(check_queue_name(name))

    def resume_queue(self, name: str) -> bool:
        """Let clients claim from ``name`` again; False if it was not paused (a no-op).

        Listening clients (``Config.notify``) are woken at once by a
        notification on the queue; others pick the queue up within one poll
        interval.

        Raises:
            drover.InvalidInsertOpts: ``name`` is not a valid queue name.
        """
        resumed = self._store.resume_queue(check_queue_name(name))
        if resumed:
            self._resumed()
        return resumed

    def queue_states(self) -> list[QueueState]:
        """Every queue ever paused, by name; ``QueueState.paused`` tells whether it still is."""
        return self._store.queue_states()

    def _resumed(self) -> None:
        """Called after a resume took effect (the Client wakes its own fetcher)."""
