"""Sends the wake-ups for inserts the client committed itself, after the commit, coalesced."""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable, Collection

from drover._db.store import Store
from drover._kernel.service import ThreadService

__all__ = ["Notifier"]

# After a round, wait this long before the next, so a stream of inserts shares
# one NOTIFY per queue per gap instead of one per insert. A round costs the
# client a round trip and the server a commit; 10 ms caps that at 100 a
# second, while an insert into a quiet client is still announced at once.
_GAP = 0.010
# How long one round may wait for a pool connection; a wake-up is only a hint
# (workers poll), so it is dropped rather than allowed to hold up close().
_BORROW_TIMEOUT = 2.0


class Notifier(ThreadService):
    """Queues the NOTIFY for ``Client.insert`` and ``Client.insert_many`` after they commit.

    A NOTIFY inside the inserting transaction makes PostgreSQL hold its global
    notification lock across that transaction's commit, WAL flush included,
    so concurrent notifying inserts commit one at a time. Sent here instead,
    in a transaction of its own with ``synchronous_commit`` off, the lock is
    held without waiting for a flush, the inserts keep committing in groups,
    and one notification serves every insert of the moment.

    Guarantee: every call to ``committed`` is followed by a NOTIFY for
    each of its queues that *starts after the call*, so a listener woken by
    it sees the committed rows. Queues named while a round is in flight wait
    for the next round; rounds are at least 10 ms apart, so a busy client
    sends at most a hundred a second, however fast it inserts (and a job
    inserted just after a round waits up to 10 ms for its wake-up).
    The thread starts with the first call. A failed round is logged at ERROR
    and its queues are dropped (workers still find the jobs by polling).
    ``stop`` sends what is pending before the thread ends; a call after
    ``stop`` notifies inline. A notifier nobody stops is stopped at interpreter
    exit, so the last inserts of a process are announced too.
    """

    name = "notifier"

    def __init__(self, *, store: Store, client_id: str, logger: logging.Logger) -> None:
        super().__init__(client_id=client_id, logger=logger)
        self._store = store
        self._pending: set[str] = set()
        self._changed = threading.Condition()
        self._exit_hook: Callable[[], None] | None = None
        self.rounds = 0

    def start(self) -> None:
        super().start()
        # The thread is a daemon: the interpreter does not wait for it. A
        # process that ended right after inserting, without close() (a
        # producer script), ended before the round for its last jobs (on a
        # caller's pool that does not autocommit, a round under way was cut
        # off after its BEGIN), and they waited out the workers' poll
        # interval. atexit hooks run while daemon threads still do: stop
        # there as close() does, sending what is pending. The hook holds only
        # a weak reference, and stop() unregisters it.
        with self._lock:
            if self._thread is None or self._exit_hook is not None:
                return
            ref = weakref.ref(self)

            def stop_at_exit() -> None:
                notifier = ref()
                if notifier is not None:
                    notifier.stop()

            self._exit_hook = stop_at_exit
        atexit.register(stop_at_exit)

    def stop(self, timeout: float | None = 10.0) -> bool:
        with self._lock:
            hook, self._exit_hook = self._exit_hook, None
        if hook is not None:
            atexit.unregister(hook)
        return super().stop(timeout)

    def committed(self, queues: Collection[str]) -> None:
        """Ask for a wake-up on ``queues``, whose new jobs have committed."""
        pending = self._pending
        if len(queues) == 1 and next(iter(queues)) in pending:
            # Already pending means not yet taken by a round, so the round
            # that takes it starts after this call (the set is only ever
            # changed whole under the GIL). No lock for the common case.
            return
        with self._changed:
            # Decided under the lock the loop exits under: either the loop
            # will still see these queues, or it is gone and we send them here.
            inline = self._stopping.is_set()
            if not inline:
                # The loop waits only while nothing is pending: wake it on
                # the first queue, not on every insert.
                idle = not self._pending
                self._pending.update(queues)
                if idle:
                    self._changed.notify()
        if inline:
            self._send(sorted(set(queues)))
        elif self._thread is None:
            self.start()
            if self._thread is None:
                # stop() came between our check and the start, which it
                # refused: nobody else will send what we just queued.
                self.run_once()

    def run_once(self) -> list[str]:
        """Send one round for everything pending now; returns the queues it named."""
        with self._changed:
            batch = sorted(self._pending)
            self._pending.clear()
        if batch:
            self._send(batch)
        return batch

    def _send(self, queues: list[str]) -> None:
        if not queues:
            return
        try:
            self._store.notify_now(queues, timeout=_BORROW_TIMEOUT)
            self.rounds += 1
        except Exception:
            self._log.error(
                "notify listeners of insert failed (queues %s); "
                "workers will find the jobs by polling",
                ",".join(queues),
                extra={"queues": queues},
                exc_info=True,
            )

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify()

    def _loop(self) -> None:
        while True:
            with self._changed:
                while not self._pending and not self._stopping.is_set():
                    self._changed.wait()
                if not self._pending:
                    return
            self.run_once()
            self._stopping.wait(_GAP)
