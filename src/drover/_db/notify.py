"""LISTEN/NOTIFY wake-ups: the listening connection and the notify statements (``notify.sql``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import LiteralString

from drover._db import Connection
from drover._db.deadline import socket_deadline
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.qualify import CHANNEL_BASES
from drover._db.queries import query

__all__ = [
    "CANCEL_CHANNEL",
    "CHANNEL",
    "Listening",
    "kind_payload",
    "notify_queues",
    "notify_queues_now",
]

CHANNEL = "drover"
CANCEL_CHANNEL = "drover_cancel"
"""Operators' requests to cancel a running job (ADR 0030)."""

KIND_PREFIX = "\x1fkind:"
"""Starts the payload that names a kind, not a queue: a job of that kind held capacity
of a cluster-wide concurrency limit and has ended. A kind limit spans queues, so every
client working that kind is woken, whatever its queues (ADR 0052). The unit separator
first: no queue is named so by accident, and an older listener takes it for a queue it
does not work and ignores it."""


def kind_payload(kind: str) -> str:
    """The wake-up payload for capacity freed by a job of ``kind`` (``KIND_PREFIX``)."""
    return KIND_PREFIX + kind


class Listening:
    """A dedicated connection listening on drover's channel (not from the pool: LISTEN is
    session state, and it must end with the connection).

    Needs a session: behind PgBouncer in transaction mode the LISTEN would be
    lost, so the store opens it on ``Config.session_url`` there, or not at all
    (ADR 0040). Owned by one thread.
    """

    def __init__(
        self,
        connect: Callable[[str, str], Connection],
        listen: LiteralString = "notify_listen",
        action: str = "listen for job notifications",
        *,
        also: LiteralString | None = None,
        ns: Namespace = DEFAULT,
    ) -> None:
        # connect(action, role): a session of its own (Store._session_connect).
        conn = connect(action, "listener")
        # The schema's channels back to drover's names, so callers compare
        # with CHANNEL and CANCEL_CHANNEL whatever the schema (ADR 0043).
        self._bases = {ns.channel(base): base for base in CHANNEL_BASES}
        self._ns = ns
        try:
            with translate(action):
                if also is not None:
                    conn.execute(query(also, ns))
                conn.execute(query(listen, ns))
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def wait(self, timeout: float) -> list[str]:
        """Block up to ``timeout`` seconds for notifications; return their payloads."""
        with translate("wait for job notifications"):
            return [n.payload for n in self._conn.notifies(timeout=timeout, stop_after=1)]

    def wait_channels(self, timeout: float) -> list[tuple[str, str]]:
        """Block up to ``timeout`` seconds for notifications; return ``(channel, payload)``,
        the channel by its default name (``CHANNEL``, ``CANCEL_CHANNEL``) in any schema."""
        with translate("wait for job notifications"):
            return [
                (self._bases.get(n.channel, n.channel), n.payload)
                for n in self._conn.notifies(timeout=timeout, stop_after=1)
            ]

    def ping(self, deadline: float) -> None:
        """Round-trip one statement; break the connection if no answer within ``deadline`` s.

        A half-open connection (the peer or a middlebox stopped answering
        while TCP still acknowledges) blocks a psycopg call forever:
        keepalives do not fire. The deadline breaks it with an ordinary
        connection error.
        """
        with socket_deadline(self._conn, deadline), translate("check the notification connection"):
            self._conn.execute(query("notify_ping", self._ns))

    def close(self) -> None:
        """Close the connection (which ends the LISTEN)."""
        self._conn.close()


def notify_queues(conn: Connection, queues: Sequence[str], *, ns: Namespace = DEFAULT) -> None:
    """Queue one wake-up per queue, delivered when the connection's transaction commits."""
    if not queues:
        return
    with translate("notify listeners"), conn.cursor() as cur:
        cur.execute(query("notify_queues", ns), {"queues": list(queues)})


def notify_queues_now(conn: Connection, queues: Sequence[str], *, ns: Namespace = DEFAULT) -> None:
    """Notify ``queues`` in a transaction of its own that does not wait for its WAL flush.

    ``conn`` must be in autocommit mode (a pool connection of drover's): the
    statement is its own transaction, and its ``synchronous_commit = off``
    ends with it.
    """
    if not queues:
        return
    with translate("notify listeners"), conn.cursor() as cur:
        cur.execute(query("notify_queues_now", ns), {"queues": list(queues)})
