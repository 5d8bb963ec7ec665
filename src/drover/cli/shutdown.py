"""How a ``drover worker`` process ends (ADR 0053).

The first SIGINT/SIGTERM starts the drain (``Client.stop`` with the
shutdown budget). When the budget runs out, the jobs still running are handed
back, and the process then ends at once with ``os._exit``: Python cannot stop
a thread, and a handler that ignores ``job.context`` would otherwise keep the
process alive (the interpreter joins every pool thread at exit) while another
worker runs its job again. Before the hand-back, ``Client._hold_hand_backs``'
session locks the jobs' rows until the process ends, so no other worker can
claim them while their old threads can still run.

A second signal during the drain ends the process at once, with one line on
standard error and status 128 + the signal's number (130 for SIGINT, 143 for
SIGTERM); the jobs still running stay ``running`` until their leases expire
and a rescuer returns them, as after a kill.

Only the command's own process does this: a library's ``Client.stop`` never
ends a process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import NoReturn

import drover

__all__ = ["SECOND_SIGNAL_NOTE", "Signals", "end_process", "second_signal_exit", "serve"]

_FLUSH_WAIT = 5.0
"""How long ``end_process`` waits for logging's handlers to flush before it exits anyway
(a handler thread left holding a handler's lock must not keep the process alive)."""

SECOND_SIGNAL_NOTE = (
    "the jobs still running stay running until their leases expire and a rescuer "
    "returns them to the queue"
)


def second_signal_exit(signum: int) -> int:
    """The exit status after a second signal: 128 + its number, as a shell reports a kill."""
    return 128 + signum


def _flush() -> None:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def end_process(code: int) -> NoReturn:
    """Flush logging and the standard streams, then end the process with ``code`` at once.

    The threads still running (a handler that ignored its cancelled context)
    end with it: nothing joins them. The flush runs on a thread of its own,
    waited for at most a few seconds, so a lock an abandoned thread holds
    cannot keep the process alive.
    """
    flusher = threading.Thread(target=_flush, name="drover-exit-flush", daemon=True)
    flusher.start()
    flusher.join(_FLUSH_WAIT)
    os._exit(code)


def _quick_exit(code: int, line: str) -> NoReturn:
    """End the process from a signal handler: one line written past every buffer, then exit."""
    with contextlib.suppress(OSError):
        os.write(2, line.encode(errors="replace") + b"\n")
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    os._exit(code)


class Signals:
    """The signals a worker process obeys: the first starts the drain, a second ends it.

    ``install`` puts the handlers in place (main thread only) and ``restore``
    puts the previous ones back. ``received`` is set by the first signal
    (``first`` names it) and so is every event in ``wakes``; a second one
    ends the process at once (``_quick_exit``). ``ignore`` lists signals to
    ignore meanwhile (a supervised process leaves SIGINT, which a terminal's
    Ctrl-C sends to the whole process group, to its supervisor, which
    forwards it as SIGTERM).
    """

    def __init__(
        self,
        *,
        obey: Iterable[signal.Signals] = (signal.SIGINT, signal.SIGTERM),
        ignore: Iterable[signal.Signals] = (),
        wakes: Iterable[threading.Event] = (),
    ) -> None:
        self._obey = tuple(obey)
        self._ignore = tuple(ignore)
        self._wakes = tuple(wakes)
        self.received = threading.Event()
        self.first: int | None = None
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        for sig in self._obey:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        for sig in self._ignore:
            self._previous[sig] = signal.signal(sig, signal.SIG_IGN)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]  # what signal.signal returned
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received.is_set():
            name = signal.Signals(signum).name
            code = second_signal_exit(signum)
            _quick_exit(
                code,
                f"drover: a second {name} during the drain: exiting at once with status "
                f"{code}; {SECOND_SIGNAL_NOTE}",
            )
        self.first = signum
        self.received.set()
        for wake in self._wakes:
            wake.set()


def serve(
    client: drover.Client,
    report: Callable[[drover.DrainIncomplete], None],
    *,
    also_close: drover.Client | None = None,
) -> None:
    """``client.run()`` for a worker command's own process, which it ends after a hand-back.

    Runs until SIGINT/SIGTERM, then stops with ``config.shutdown_timeout``; a
    clean drain returns. When the budget ran out, the unfinished jobs are
    handed back (held from other workers until this process ends),
    ``report`` prints the verdict, ``also_close`` (the client the running
    one borrows its pool from) is closed, and the process ends at once with
    status 1: a handler that ignored its cancelled context ends with it. A
    second signal during the drain ends the process at once (``Signals``).
    Main thread only.
    """
    hold = client._hold_hand_backs()
    signals = Signals()
    signals.install()
    try:
        client.start()
        while not signals.received.wait(0.5):
            pass
        # Connected now, so the deadline pays one statement, not a connection.
        hold.open()
        try:
            client.stop(client.config.shutdown_timeout)
        except drover.DrainIncomplete as verdict:
            report(verdict)
            if also_close is not None:
                with contextlib.suppress(drover.DroverError):
                    also_close.close()
            end_process(1)
    finally:
        signals.restore()
        hold.close()
