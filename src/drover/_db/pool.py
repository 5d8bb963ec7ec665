"""drover's own connections: the pool (its own or the application's), borrowing, dedicated ones.

A pool drover opens records how its connection attempts end, so a borrower
fails at once with the server's reason instead of waiting out the pool's
timeout. A dedicated connection is opened with the pool's settings but kept
out of it, for session state (LISTEN, a session advisory lock).

Behind a transaction pooler (PgBouncer in ``pool_mode = transaction``) a
connection may reach a different server session for every transaction, so
drover's own connections there never prepare statements (ADR 0040):
``behind_pooler`` tells, and ``open_pool`` and ``dedicated_connect`` apply it.
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
import time
import weakref
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Self, TypeAlias

import psycopg
from psycopg.rows import tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from drover._db import Connection
from drover._db.conninfo import check_conninfo, describe_target, names_application
from drover._db.errors import naming_role, redact, translate
from drover._db.queries import query
from drover.errors import DatabaseError, InvalidArgument

__all__ = [
    "POOL_TIMEOUT",
    "RECONNECT_TIMEOUT",
    "ConnectAttempts",
    "Connection",
    "ConnectionPool",
    "HeldConnection",
    "OwnedPool",
    "PoolOrConninfo",
    "behind_pooler",
    "borrow",
    "borrow_connection",
    "dedicated_connect",
    "open_pool",
    "pool_from",
    "without_prepares",
]

PoolOrConninfo: TypeAlias = "ConnectionPool[Any] | str"


def _autocommit(conn: Connection) -> None:
    # drover's own connections run single statements in autocommit (one round
    # trip per insert) and open explicit transactions where several statements
    # must be atomic.
    conn.autocommit = True


def behind_pooler(conn: Connection) -> bool:
    """True when ``conn`` reaches PostgreSQL through a connection pooler (PgBouncer).

    One round trip: the server's ``pg_backend_pid()`` against the pid the
    startup handshake announced. PostgreSQL announces its own; a pooler
    answers the handshake itself with a key of its own, so they differ (a
    pooler in session mode is reported too: the caller decides what it
    trusts it with). Run on an idle connection; its transaction state is
    left as it was in autocommit.
    """
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("pooler_backend_pid"), prepare=False)
        row = cur.fetchone()
    if not conn.autocommit:
        conn.rollback()
    return row is None or int(row[0]) != conn.info.backend_pid


def without_prepares(conn: Connection, pooled: bool | None) -> bool:
    """Turn off prepared statements on ``conn`` if it is behind a pooler; return whether it is.

    ``pooled`` is what the configuration says (``None``: ask the server with
    ``behind_pooler``). psycopg prepares a statement after its fifth run on a
    connection (``prepare_threshold``); PgBouncer before 1.21 (or without
    ``max_prepared_statements``) runs the next transaction on another server
    session, where the prepared statement does not exist.
    """
    if pooled is None:
        pooled = behind_pooler(conn)
    if pooled:
        conn.prepare_threshold = None
    return pooled


# While a pool has not yet shown it can connect, a borrower waits in slices of
# this long and checks between them whether the pool's last attempt failed, so
# a refused connection surfaces in a fraction of a second, not after the
# pool's whole timeout.
_SLICE = 0.05


class ConnectAttempts:
    """What the latest connection attempts of one pool said, for borrowers to report.

    Written by the pool's worker threads (through the pool's connection
    class), read by borrowers; each write replaces whole attributes under a
    lock, and a reader needs only a consistent enough view to choose between
    waiting and failing.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.error: BaseException | None = None
        """The exception of the latest failed attempt (kept after a success)."""
        self.failed_at: float | None = None
        self.succeeded_at: float | None = None
        # The pool drops a connection it finds broken without closing it, so a
        # count of opens minus closes would keep counting it: the set is
        # asked instead (see ``live``).
        self._opened: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()
        self.connecting = 0
        """Attempts under way now."""

    def started(self) -> None:
        with self._lock:
            self.connecting += 1

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            self.error = exc
            self.failed_at = time.monotonic()
            self.connecting -= 1

    def succeeded(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            self.succeeded_at = time.monotonic()
            self._opened.add(conn)
            self.connecting -= 1

    def closed(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            self._opened.discard(conn)

    @property
    def live(self) -> int:
        """Connections opened and not known to be closed or broken (idle or in use).

        One the server ended is counted until drover or the pool next uses it
        (``_dropped`` looks at every one a borrower takes).
        """
        with self._lock:
            opened = list(self._opened)
        return sum(1 for conn in opened if not conn.closed)

    @property
    def unreachable(self) -> bool:
        """The latest attempt failed, no other is under way, and no connection may come back.

        A failed attempt alone is not enough: a pool that cannot grow (the
        server's ``max_connections`` or a role's connection limit) still
        serves its borrowers from the connections it has, and while another
        attempt is under way (the pool opens several at once) it may succeed.
        """
        return self.down and self.live <= 0 and self.connecting <= 0

    @property
    def down(self) -> bool:
        """The latest attempt failed: the database refuses or cannot be reached."""
        ok, failed = self.succeeded_at, self.failed_at
        return failed is not None and (ok is None or failed > ok)


_OWNED_NAMES: set[str] = set()
"""The names of the pools drover opened (psycopg_pool names a pool in its log records)."""
_CONNECT_FAILURES = (
    "error connecting in %r: %s",
    "reconnection attempt in pool %r failed after %s sec",
)
"""psycopg_pool's WARNING records about a failed connection attempt, by their format."""
_DISCARDED = "discarding closed connection: %s"
"""psycopg_pool's WARNING record about a broken connection it drops (its one argument)."""


class _ConnectFailuresAtDebug(logging.Filter):
    """psycopg_pool's connection-failure warnings about drover's own pools, demoted to DEBUG.

    Also its warning about a broken connection of drover's own pools that it
    drops (the server ended the session): the loops' episode says it once.

    A borrower of such a pool already fails with the server's reason as a
    `drover.DatabaseError`, so the same failure should not also be printed
    once per attempt, which is what Python's last-resort handler does with a
    WARNING when the application configured no logging. The record becomes a
    DEBUG record and goes on only if `psycopg.pool` is enabled for DEBUG: an
    application that logs at DEBUG still sees every attempt. Records about the
    application's own pools are left as they are.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Demote a matching record, dropping it unless DEBUG is enabled; pass the rest."""
        if record.levelno != logging.WARNING:
            return True
        args = record.args
        if not isinstance(args, tuple) or not args:
            return True
        if record.msg == _DISCARDED:
            # A connection the server ended: drover's loops report the episode.
            if not getattr(args[0], "drover_owned", False):
                return True
        elif record.msg not in _CONNECT_FAILURES or args[0] not in _OWNED_NAMES:
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


logging.getLogger("psycopg.pool").addFilter(_ConnectFailuresAtDebug())


class OwnedPool(ConnectionPool[Any]):
    """A pool drover opened itself: it records how its connection attempts end.

    psycopg_pool connects in background threads and only logs why an attempt
    failed; a borrower would wait out the whole pool timeout and learn only
    that no connection came. Recording the attempts lets ``borrow`` fail
    as soon as the server refuses, with the server's reason.
    """

    def __init__(self, conninfo: str, *, pooled: bool | None = None, **kwargs: Any) -> None:
        self.attempts = ConnectAttempts()
        self.target = describe_target(conninfo)
        """``host:port/dbname``: how messages name the database (never the password)."""
        self.pooled = pooled
        """Whether its connections go through a transaction pooler: as configured, or
        as the first connection found out (``None`` until then). Prepared
        statements are off on every connection of a pooled pool."""
        attempts = self.attempts
        _OWNED_NAMES.add(str(kwargs.get("name") or "drover"))

        class RecordingConnection(psycopg.Connection[Any]):
            drover_owned = True

            @classmethod
            def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
                attempts.started()
                try:
                    conn = super().connect(conninfo, **kwargs)
                except BaseException as exc:
                    attempts.failed(exc)
                    raise
                attempts.succeeded(conn)
                return conn

            def close(self) -> None:
                # The pool closes the connections it discards as expired or
                # surplus, and all of them when it closes; a broken one it
                # drops as it is (``live`` skips it, being closed).
                attempts.closed(self)
                super().close()

        super().__init__(
            conninfo, connection_class=RecordingConnection, configure=self._configure, **kwargs
        )

    def _configure(self, conn: Connection) -> None:
        # Run by the pool's worker threads on every new connection: one
        # detection round trip per connection (not per borrow) until the
        # answer is known; a pool reaches one server, so one answer holds.
        _autocommit(conn)
        self.pooled = without_prepares(conn, self.pooled)


# How long the pool retries one lost or refused connection (attempts 1, 3 and 7 s
# after the first) before it gives up on it. psycopg_pool's default is five
# minutes, by when its backoff has grown past two: a worker would take that
# long to notice freed connection slots. Once it gives up, the next borrower
# asks for a connection again (``_nudge``), and the first attempt is at once.
RECONNECT_TIMEOUT = 5.0
POOL_TIMEOUT = 30.0
"""Seconds a borrower of drover's own pool waits for a connection while the pool has some (all
in use); with none and the server refusing, it fails at once with the server's reason."""


def open_pool(
    conninfo: str, *, max_size: int = 10, name: str = "drover", pooled: bool | None = None
) -> OwnedPool:
    """Open a pool that drover owns (and will close).

    ``pooled``: whether the conninfo leads to a transaction pooler (``None``:
    the first connection finds out); prepared statements are off if so.
    """
    kwargs: dict[str, Any] = {}
    if not names_application(conninfo):
        kwargs["application_name"] = "drover"
    return OwnedPool(
        conninfo,
        pooled=pooled,
        kwargs=kwargs,
        min_size=1,
        max_size=max(1, max_size),
        open=True,
        name=name,
        timeout=POOL_TIMEOUT,
        reconnect_timeout=RECONNECT_TIMEOUT,
    )


def _cannot_connect(pool: OwnedPool, action: str) -> DatabaseError:
    cause = pool.attempts.error
    reason = redact(str(cause).strip()) if cause is not None else "unknown reason"
    error = DatabaseError(f"{action}: cannot connect to the database at {pool.target}: {reason}")
    error.__cause__ = cause
    return error


def _dropped(conn: Connection) -> bool:
    """True when the server has ended this idle pooled connection (or sent it something).

    An idle connection has nothing to read: a readable socket means the
    server closed it (``idle_session_timeout``, ``pg_terminate_backend``, a
    restart) and sent its last message, or a notice arrived. Only then does a
    round trip decide; the usual case costs one ``select`` and no round trip.
    """
    if conn.closed:
        return True
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    if not readable:
        return False
    try:
        ConnectionPool.check_connection(conn)
    except psycopg.Error:
        return True
    return False


def _nudge(pool: OwnedPool) -> Connection | None:
    """Ask the pool for a connection without waiting: it starts an attempt if none is under way.

    A pool that gave up reconnecting (after ``RECONNECT_TIMEOUT``) tries again
    only when a borrower asks; this is that request, made at the pace of the
    borrowers (each backs off), not of a busy loop.
    """
    try:
        conn: Connection = pool.getconn(timeout=0.001)
    except PoolTimeout:
        return None
    return conn


def _getconn(pool: OwnedPool, timeout: float | None, action: str) -> Connection:
    """A connection from ``pool``, failing at once (with the reason) while it cannot connect."""
    budget = pool.timeout if timeout is None else timeout
    attempts = pool.attempts
    deadline = time.monotonic() + budget
    while True:
        conn: Connection | None = None
        if attempts.unreachable:
            conn = _nudge(pool)
            if conn is None and attempts.unreachable:
                raise _cannot_connect(pool, action)
        remaining = deadline - time.monotonic()
        if conn is None:
            try:
                # While the pool holds connections and can open more, wait in
                # one piece (fair to other waiters: one will come back). With
                # none, or once an attempt failed, in slices that look again:
                # the connections it holds may be ones the server ended, and
                # a borrower must fail with the reason when the last is found
                # dead, not wait out the pool's timeout.
                whole = attempts.live > 0 and not attempts.down
                conn = pool.getconn(
                    timeout=max(0.001, remaining if whole else min(_SLICE, remaining))
                )
            except PoolTimeout:
                if attempts.unreachable:
                    error = _cannot_connect(pool, action)
                    raise error from error.__cause__
                if time.monotonic() < deadline:
                    continue
                stats = pool.get_stats()
                refused = attempts.error if attempts.down else None
                why = (
                    f"; the server refuses more: {redact(str(refused).strip())}" if refused else ""
                )
                raise DatabaseError(
                    f"{action}: no database connection became available within {budget:g}s "
                    f"({stats.get('pool_size', 0)} open, all in use; max_size is "
                    f"{pool.max_size}{why})"
                ) from None
        if _dropped(conn):
            # The pool sees it broken and opens a replacement; take another now.
            pool.putconn(conn)
            continue
        return conn


def borrow_connection(pool: ConnectionPool[Any], action: str) -> Connection:
    """Take a connection from ``pool`` for a caller that gives it back itself (``putconn``)."""
    if isinstance(pool, OwnedPool):
        return _getconn(pool, None, action)
    conn: Connection = pool.getconn()
    return conn


@contextlib.contextmanager
def borrow(
    source: PoolOrConninfo | Connection, action: str, *, timeout: float | None = None
) -> Iterator[Connection]:
    """Yield a connection from a pool, a conninfo string, or an open connection.

    A connection opened from a conninfo string is closed afterwards; a pool's
    connection goes back to the pool (committed on success, rolled back on an
    error, by the pool's own context manager). ``timeout`` bounds the wait for
    a pool connection (default: the pool's own).
    """
    if isinstance(source, psycopg.Connection):
        with naming_role(source):
            yield source
    elif isinstance(source, OwnedPool):
        with translate(action):
            conn = _getconn(source, timeout, action)
            try:
                # Commits on success and rolls back on an error, as the pool's
                # own connection() does; a pool connection is not closed.
                with conn, naming_role(conn):
                    yield conn
            finally:
                source.putconn(conn)
    elif isinstance(source, ConnectionPool):
        with translate(action), source.connection(timeout=timeout) as conn, naming_role(conn):
            yield conn
    elif isinstance(source, str):
        # The checks pool_from makes: an empty string would mean libpq's
        # defaults (some other database), and a parse error quotes the text.
        if not source.strip():
            raise InvalidArgument(f"{action} needs a conninfo string or URL; got an empty string")
        try:
            conninfo = check_conninfo(source)
        except ValueError as exc:
            raise InvalidArgument(f"{action}: {exc}") from None
        with translate(action):
            conn = psycopg.connect(conninfo, autocommit=True)
        with conn, naming_role(conn):
            # A one-shot connection may still run a statement more than five
            # times (migrate records each migration): no prepares behind a pooler.
            with translate(action):
                without_prepares(conn, None)
            yield conn
    else:
        raise InvalidArgument(
            f"{action} needs a psycopg_pool.ConnectionPool or a conninfo string, "
            f"not {type(source).__name__}"
        )


def pool_from(
    source: object, *, who: str, max_size: int, pooled: bool | None = None
) -> tuple[ConnectionPool[Any], bool]:
    """``(pool, owned)``: the caller's pool as is, or a new one opened from a conninfo string.

    A conninfo string is parsed first, so a malformed one is an
    ``drover.InvalidArgument`` here (without the password), not a
    connection failure later.
    """
    if isinstance(source, str):
        if not source.strip():
            raise InvalidArgument(f"{who} needs a conninfo string or URL; got an empty string")
        try:
            check_conninfo(source)
        except ValueError as exc:
            raise InvalidArgument(f"{who}: {exc}") from None
        return open_pool(source, max_size=max_size, pooled=pooled), True
    if isinstance(source, ConnectionPool):
        return source, False
    raise InvalidArgument(
        f"{who} needs a psycopg_pool.ConnectionPool or a conninfo string, "
        f"not {type(source).__qualname__}"
    )


def dedicated_connect(
    pool: ConnectionPool[Any],
    action: str,
    role: str,
    *,
    session_url: str | None = None,
    pooled: bool | None = None,
) -> Connection:
    """An autocommit connection of its own, opened with ``pool``'s settings but not from it.

    For session state that must not leak into pooled connections (LISTEN, a
    session advisory lock) and must end with the connection. Unless the
    caller's settings name one, its ``application_name`` is ``drover-<role>``,
    so an operator can tell it apart in ``pg_stat_activity``. With
    ``session_url`` (``Config.session_url``: a direct route past a
    transaction pooler) it connects there instead of to the pool's conninfo.
    ``pooled`` says whether the pool's conninfo leads to a transaction pooler
    (``None``: this connection finds out); prepared statements are off on a
    connection that goes through one. Its session's ``idle_session_timeout``
    is off (PostgreSQL 14 and later), unless it goes through a pooler, where
    a SET would outlive it in a shared server session.
    """
    # psycopg_pool accepts callables for both (credentials that rotate).
    conninfo = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
    if session_url is not None:
        conninfo, pooled = session_url, None
    extra = pool.kwargs() if callable(pool.kwargs) else pool.kwargs
    kwargs = {**(extra or {}), "autocommit": True}
    conninfo = check_conninfo(conninfo)
    # A pool drover opened carries drover's own default name, not the caller's:
    # the dedicated connection gets its role's name instead.
    drovers_default = isinstance(pool, OwnedPool) and kwargs.get("application_name") == "drover"
    if drovers_default or ("application_name" not in kwargs and not names_application(conninfo)):
        kwargs["application_name"] = f"drover-{role}"
    with translate(action):
        conn = psycopg.connect(conninfo, **kwargs)
        try:
            if not without_prepares(conn, pooled) and conn.info.server_version >= 140000:
                # Idle by design (it waits for notifications, or holds a lock):
                # a role's idle_session_timeout must not end it every few
                # seconds. The pool's connections keep the operator's setting.
                conn.execute("SET idle_session_timeout = 0")
        except BaseException:
            conn.close()
            raise
        return conn


# Long enough to cover a drain's rounds, short enough that the pool recycles
# the connection on its usual schedule.
_MAX_HOLD = 30.0


class HeldConnection:
    """``with held as conn:`` yields the connection kept from the last round, or a new one.

    Not thread-safe: one loop thread owns it. Leaving the block with an
    exception returns the connection to the pool, which rolls back or
    discards it; ``release`` returns it when the loop goes idle. On a
    pool that does not autocommit (a caller's own pool), each round is
    committed as it ends, as a plain borrow would.
    """

    def __init__(self, pool: ConnectionPool[Any], action: str) -> None:
        self._pool = pool
        self._action = action
        self._conn: Connection | None = None
        self._since = 0.0

    def __enter__(self) -> Connection:
        conn = self._conn
        if conn is None:
            with translate(self._action):
                conn = borrow_connection(self._pool, self._action)
            self._conn = conn
            self._since = time.monotonic()
        return conn

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn = self._conn
        if conn is None:
            return
        if exc_type is not None:
            self._return(conn)
            return
        if not conn.autocommit:
            with translate(self._action):
                try:
                    conn.commit()
                except BaseException:
                    self._return(conn)
                    raise
        if time.monotonic() - self._since > _MAX_HOLD:
            self._return(conn)

    def release(self) -> None:
        """Return the connection to the pool, if one is held."""
        if self._conn is not None:
            self._return(self._conn)

    def _return(self, conn: Connection) -> None:
        self._conn = None
        self._pool.putconn(conn)

    @property
    def holding(self) -> bool:
        """True while a connection is kept (for tests)."""
        return self._conn is not None
