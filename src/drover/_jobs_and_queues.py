"""Reading a job by id and switching queues: one implementation for the Client and the Inspector."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drover._db.store_operator import OperatorStore
from drover.errors import NotFound
from drover.job import JobRow, check_job_id
from drover.queues import QueueState, check_queue_name

__all__ = ["JobsAndQueues"]


class JobsAndQueues:
    """``get_job``, ``get_result``, ``pause_queue``, ``resume_queue`` and ``queue_states``
    over a store's operator side.

    ``drover.Client`` and ``drover.Inspector`` each hold one and delegate
    their methods of these names to it, so both check their arguments and
    answer alike; the public docstrings are theirs. ``on_resume``, when
    given, is called after a resume took effect (the Client wakes its own
    fetcher). Thread-safe: each call borrows one pool connection for its
    statement.
    """

    def __init__(
        self, operator: OperatorStore, *, on_resume: Callable[[], None] | None = None
    ) -> None:
        self._operator = operator
        self._on_resume = on_resume

    def get_job(self, job_id: int) -> JobRow:
        """The job's row now; ``NotFound`` when there is none (see ``Client.get_job``)."""
        checked = check_job_id(job_id)
        row = self._operator.get_job(checked)
        if row is None:
            raise NotFound(f"job {checked} does not exist")
        return row

    def get_result(self, job_id: int) -> Any:
        """The job's stored result now, ``None`` for none yet (see ``Client.get_result``)."""
        checked = check_job_id(job_id)
        found = self._operator.job_result(checked)
        if found is None:
            raise NotFound(f"job {checked} does not exist")
        return found.result

    def pause_queue(self, name: str) -> QueueState:
        """Pause ``name`` for every client after checking the name (see ``Client.pause_queue``)."""
        return self._operator.pause_queue(check_queue_name(name))

    def resume_queue(self, name: str) -> bool:
        """Resume ``name``; False when it was not paused (see ``Client.resume_queue``)."""
        resumed = self._operator.resume_queue(check_queue_name(name))
        if resumed and self._on_resume is not None:
            self._on_resume()
        return resumed

    def queue_states(self) -> list[QueueState]:
        """Every queue with a pause record, by name."""
        return self._operator.queue_states()
