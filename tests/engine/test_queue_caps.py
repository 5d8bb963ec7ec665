"""``Queue(max_workers=N)`` in a running client: the cap holds, the other queues fill the pool,
and a freed slot of a capped queue is claimed again on a wake-up, not a poll.

Handlers hold their slots on a semaphore per queue, so the test decides when
each job ends; every wait is a ``poll`` with a deadline or an ``observe`` window.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from jobdb import MakeClient, Poll, observe

import drover

SAFETY = 20.0
"""Longest a held handler waits on its own (a failing test never hangs)."""

IDLE_POLL = 30.0
"""A poll interval no wake-up test could mistake for a wake-up."""

WAKE_BUDGET = 15.0
"""How soon a woken fetcher must start the next job: half ``IDLE_POLL``, room for a busy
machine but not for a missed wake-up."""


class Image(drover.JobArgs, kind="qcaps_image", queue="images"):
    n: int = 0


class Plain(drover.JobArgs, kind="qcaps_plain"):
    n: int = 0


class Board:
    """Records how many jobs of each queue run at once; holds each until its queue is released."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.started: Counter[str] = Counter()
        self.done: Counter[str] = Counter()
        self.start_times: dict[str, list[float]] = {"images": [], "default": []}
        self.gates = {"images": threading.Semaphore(0), "default": threading.Semaphore(0)}

    def _run(self, queue: str) -> None:
        with self.lock:
            self.running[queue] += 1
            self.most[queue] = max(self.most[queue], self.running[queue])
            self.started[queue] += 1
            self.start_times[queue].append(time.monotonic())
        try:
            self.gates[queue].acquire(timeout=SAFETY)
        finally:
            with self.lock:
                self.running[queue] -= 1
                self.done[queue] += 1

    def image(self, job: drover.Job[Image]) -> None:
        self._run(job.queue)

    def plain(self, job: drover.Job[Plain]) -> None:
        self._run(job.queue)

    def release(self, queue: str, n: int = 1) -> None:
        self.gates[queue].release(n)

    def now(self) -> tuple[int, int]:
        """(images running, default running)."""
        with self.lock:
            return self.running["images"], self.running["default"]

    def workers(self) -> drover.Workers:
        w = drover.Workers()
        w.register(args=Image)(self.image)
        w.register(args=Plain)(self.plain)
        return w


@pytest.fixture
def board(make_client: MakeClient) -> Iterator[Board]:
    b = Board()
    yield b
    # Before make_client stops the clients: no handler keeps a drain waiting.
    b.release("images", 1000)
    b.release("default", 1000)


def _capped(board: Board, **fields: object) -> drover.Config:
    fields.setdefault("poll_interval", 0.05)
    return drover.Config(
        workers=board.workers(),
        concurrency=6,
        queues={"images": drover.Queue(max_workers=2), "default": 1},
        **fields,  # type: ignore[arg-type]
    )


def test_a_capped_queue_never_runs_more_than_max_workers_while_other_queues_fill_the_pool(
    make_client: MakeClient, board: Board, poll: Poll
) -> None:
    # Four default jobs: whichever queue the weighted order tries first, the
    # pool ends up with two images (the cap) and the four default jobs.
    client = make_client(_capped(board))
    client.insert_many([Image(n=i) for i in range(8)] + [Plain(n=i) for i in range(4)])
    client.start()
    poll(lambda: board.now() == (2, 4), message="two images and four default jobs run")

    def full() -> None:
        assert board.now() == (2, 4)

    observe(0.3, full)
    board.release("default", 4)
    poll(lambda: board.done["default"] == 4, message="the default jobs end")

    def capped() -> None:
        # Four slots idle, six images waiting: the cap, not the pool, holds them.
        assert board.now() == (2, 0)

    observe(0.5, capped)
    board.release("images", 1000)
    poll(lambda: board.done["images"] == 8, message="every image ran")
    assert board.most["images"] == 2
    assert board.most["default"] == 4


def test_a_freed_slot_of_a_capped_queue_is_claimed_on_a_wake_up_not_a_poll(
    make_client: MakeClient, board: Board, poll: Poll
) -> None:
    # Three slots stay idle (one default job only), so the fetcher is asleep on
    # its poll interval, not waiting for a slot: only the wake-up of the
    # capped queue's room can start the next image within seconds. No
    # LISTEN/NOTIFY either, so no notification can stand in for it.
    client = make_client(_capped(board, poll_interval=IDLE_POLL, notify=False))
    client.insert_many([Image(n=i) for i in range(4)] + [Plain()])
    client.start()
    poll(lambda: board.now() == (2, 1), message="two images and the one default job run")
    engine = client._engine
    assert engine is not None
    poll(lambda: board.started["images"] == 2 and engine.slots._idle == 3, message="3 idle slots")

    def held() -> None:
        assert board.started["images"] == 2

    observe(0.3, held)
    released_at = time.monotonic()
    board.release("images")
    poll(
        lambda: board.started["images"] == 3,
        timeout=WAKE_BUDGET,
        message="the next image starts once one returns",
    )
    assert board.start_times["images"][2] - released_at < WAKE_BUDGET
    assert board.now() == (2, 1)


def test_a_capped_queue_busy_on_every_slot_it_may_take_does_not_hold_back_a_later_backlog(
    make_client: MakeClient, board: Board, poll: Poll
) -> None:
    # Default jobs inserted after the cap was reached still get the free slots.
    # The images' weight puts them first in nearly every round: a round that
    # stopped at a queue without room would never reach default.
    client = make_client(
        _capped(board, poll_interval=IDLE_POLL).replace(
            queues={"images": drover.Queue(weight=100_000, max_workers=2), "default": 1}
        )
    )
    client.insert_many([Image(n=i) for i in range(5)])
    client.start()
    poll(lambda: board.now() == (2, 0), message="two images run")
    client.insert_many([Plain(n=i) for i in range(6)])
    poll(lambda: board.now() == (2, 4), timeout=WAKE_BUDGET, message="default fills the rest")


def test_an_int_weight_queue_has_no_cap_but_the_concurrency(
    make_client: MakeClient, board: Board, poll: Poll
) -> None:
    client = make_client(
        workers=board.workers(), concurrency=5, queues={"images": 3}, poll_interval=0.05
    )
    client.insert_many([Image(n=i) for i in range(7)])
    client.start()
    poll(lambda: board.now() == (5, 0), message="the int form fills the pool")
    board.release("images", 1000)
    poll(lambda: board.done["images"] == 7, message="all ran")
    assert board.most["images"] == 5
