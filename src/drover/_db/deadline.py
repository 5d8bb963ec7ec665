"""A client-side deadline for a call that must not hang on a half-open connection."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import psycopg

__all__ = ["socket_deadline"]


@contextlib.contextmanager
def socket_deadline(conn: psycopg.Connection[Any], seconds: float) -> Iterator[None]:
    """Shut ``conn``'s socket down if the block has not finished within ``seconds``.

    A client-side deadline for calls that must not hang on a half-open
    connection (the server or a middlebox stopped answering while the kernel
    still acknowledges, so neither keepalives nor statement timeouts help).
    The blocked call then fails with an ordinary connection error. A timer
    thread does the shutdown; nothing runs when the block finishes in time.
    If the timer fired at all, even as the block was finishing, the
    connection is closed on the way out, so a pool discards it instead of
    lending out a socket that was shut down under it.
    """
    lock = threading.Lock()
    state = {"done": False, "fired": False}

    def expire() -> None:
        with lock:
            if state["done"]:
                return
            state["fired"] = True
            _shutdown_socket(conn)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            fired = state["fired"]
        if fired:
            with contextlib.suppress(Exception):
                conn.close()


def _shutdown_socket(conn: psycopg.Connection[Any]) -> None:
    try:
        dup = socket.socket(fileno=os.dup(conn.fileno()))
    except (OSError, psycopg.Error):
        return  # already closed: the blocked call has failed or will
    try:
        dup.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        dup.close()
