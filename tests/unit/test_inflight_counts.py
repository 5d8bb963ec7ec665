"""``InFlight``'s running jobs per queue: what ``Queue.max_workers`` caps, and the room wake-up."""

from __future__ import annotations

from jobdb import sample_row

from drover._kernel.claims import Claim, InFlight


def _claim(job_id: int, queue: str, attempt: int = 1) -> Claim:
    return Claim(sample_row(id=job_id, queue=queue, attempt=attempt))


class Wakes:
    """Counts the ``on_room`` calls."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_a_claim_counts_in_its_queue_from_tracking_until_its_handler_returns() -> None:
    inflight = InFlight({"images": 2})
    a, b, c = _claim(1, "images"), _claim(2, "images"), _claim(3, "default")
    inflight.add_many([a, b])
    inflight.add(c)
    assert (inflight.running("images"), inflight.running("default")) == (2, 1)
    assert inflight.room("images") == 0
    assert inflight.room("default") is None  # no cap

    inflight.finished(a)
    assert a.finished
    assert inflight.running("images") == 1 and inflight.room("images") == 1
    # The outcome written later untracks it without counting it off again.
    inflight.untrack([(1, 1)])
    assert inflight.running("images") == 1
    inflight.finished(b)
    inflight.finished(c)
    assert (inflight.running("images"), inflight.running("default")) == (0, 0)
    assert inflight.room("images") == 2


def test_a_handler_that_returns_twice_is_counted_off_once() -> None:
    inflight = InFlight({"q": 3})
    claims = [_claim(i, "q") for i in range(1, 4)]
    inflight.add_many(claims)
    inflight.finished(claims[0])
    inflight.finished(claims[0])
    assert inflight.running("q") == 2


def test_the_room_callback_runs_only_when_a_queue_at_its_cap_drops_below_it() -> None:
    inflight = InFlight({"images": 2})
    wakes = Wakes()
    inflight.on_room(wakes)
    a, b, other = _claim(1, "images"), _claim(2, "images"), _claim(3, "default")
    inflight.add_many([a, other])
    inflight.finished(a)  # 1 of 2: the queue had room already, nobody waits for it
    inflight.finished(other)  # uncapped
    assert wakes.count == 0
    a2 = _claim(4, "images")
    inflight.add_many([a2, b])  # at its cap
    inflight.finished(b)
    assert wakes.count == 1
    inflight.finished(a2)  # below the cap already
    assert wakes.count == 1


def test_a_handed_back_claim_stops_counting_and_its_late_return_is_not_counted_twice() -> None:
    inflight = InFlight({"images": 1})
    wakes = Wakes()
    inflight.on_room(wakes)
    stuck = _claim(1, "images")
    inflight.add(stuck)
    inflight.untrack([(1, 1)])  # its handler has not returned: stays tracked and counted
    assert inflight.running("images") == 1 and inflight.held() == [(1, 1)]
    inflight.untrack([(1, 1)], handed_back=True)
    assert inflight.running("images") == 0 and inflight.held() == []
    assert wakes.count == 1
    inflight.finished(stuck)  # the abandoned handler returns at last
    assert inflight.running("images") == 0
    assert wakes.count == 1


def test_a_replaced_claim_keeps_counting_until_its_own_handler_returns() -> None:
    # Rescued, then re-claimed here while the old execution still runs: two
    # threads are busy with the job, so both count against the cap.
    inflight = InFlight({"q": 2})
    old = _claim(1, "q", attempt=1)
    inflight.add(old)
    new = _claim(1, "q", attempt=2)
    inflight.add(new)
    assert old.lease.lost.is_set()
    assert inflight.running("q") == 2 and inflight.room("q") == 0
    inflight.finished(old)
    assert inflight.running("q") == 1
    inflight.finished(new)
    assert inflight.running("q") == 0


def test_without_caps_nothing_is_capped_and_counts_still_kept() -> None:
    inflight = InFlight()
    inflight.add(_claim(1, "default"))
    assert inflight.room("default") is None
    assert inflight.running("default") == 1
