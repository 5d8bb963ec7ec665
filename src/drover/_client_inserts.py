"""The Client's insert methods: ``insert``, ``insert_tx``, ``insert_many``, ``insert_many_tx``.

A base class of ``drover.Client``, apart from the client's lifecycle
(``start``, ``stop``, ``result``, readiness) because the inserts are a
family of their own. Each is a door of the insert funnel
(``drover._insert.funnel``, ADR 0047): it prepares its input (checked and
encoded, its route fixed), and runs it through the client's insert
middleware into a writer: ``_write`` for the client's own transactions
(the combiner, the client's ``Store``), then announcing what it committed;
``drover._insert.tx.CallerWriter`` for the caller's transaction. The state
it uses (store, configuration, insert middleware, combiner, notifier) is
built by ``Client.__init__``; waking the client's own engine (``_nudge``)
belongs to the lifecycle and stays in the client.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Unpack, overload

from drover._db.store import Store
from drover._insert import tx
from drover._insert.combiner import Combiner
from drover._insert.funnel import (
    MANY,
    ONE,
    UNIQUE,
    Prepared,
    prepare_many,
    prepare_one,
    single_result,
    through,
)
from drover._runtime.notifier import Notifier
from drover.config import Config
from drover.insert_middleware import InsertMiddleware
from drover.job import InsertItem, InsertOptions, InsertOpts, JobArgs, JobRow, with_options
from drover.workflows import Chain, Group, InsertedWorkflow

__all__ = ["ClientInserts"]


class ClientInserts:
    """``insert``, ``insert_tx``, ``insert_many`` and ``insert_many_tx`` over a client's state.

    Only ``drover.Client`` derives from it, and its ``__init__`` sets the
    attributes declared here. Thread-safety, timeouts and shutdown are
    described on each method (and on ``drover.Client``). Every call goes
    through the insert middleware of ``config.middleware``
    (``drover.InsertMiddleware``), on the calling thread, its
    ``InsertBatch.operation`` the method's name.
    """

    _store: Store
    _config: Config
    _combiner: Combiner
    _insert_chain: tuple[InsertMiddleware, ...]
    _notifier: Notifier | None

    def _nudge(self) -> None:
        # Defined by the Client, which alone knows whether its engine runs.
        raise NotImplementedError

    @overload
    def insert(
        self, args: JobArgs, opts: InsertOpts | None = None, **options: Unpack[InsertOptions]
    ) -> JobRow: ...
    @overload
    def insert(self, args: Chain | Group, opts: None = None) -> InsertedWorkflow: ...
    def insert(
        self,
        args: JobArgs | Chain | Group,
        opts: InsertOpts | None = None,
        **options: Unpack[InsertOptions],
    ) -> JobRow | InsertedWorkflow:
        """Insert one job, committed when this returns, and return the stored row.

        Given a workflow (``drover.chain``, ``drover.group``), inserts all of
        its jobs in one transaction and returns a ``drover.InsertedWorkflow``
        (see the "Workflows" guide). A job with ``InsertOpts.depends_on`` is
        inserted ``pending`` in a transaction of its own, not combined with
        other calls.

        The database clock decides whether the job is ``available`` or
        ``scheduled`` (see ``InsertOpts``). The job is committed, and so
        visible to workers, when this returns.

        Safe to call from many threads at once, and cheaper that way: calls
        that arrive while another is in flight are combined into one
        statement and one transaction, run by the first of them (no extra
        thread). A combined call's job shares its transaction and
        ``created_at`` with the others; a unique-key collision fails only its
        own call; a database failure fails every call of the group. As with
        any write whose reply is lost, an error does not prove the job was
        not committed.

        With ``config.notify`` a wake-up for the queue follows the commit: a
        background thread sends it, shared with the other inserts of the same
        moment, so concurrent inserts do not queue behind PostgreSQL's
        notification lock.

        With ``InsertOpts.unique``, ``debounce`` or ``throttle`` the call may
        return the job that already holds the identity instead, with
        ``row.duplicate`` True (nothing was inserted; a debounce has replaced
        its args). Such calls are not combined with others: each runs its own
        statement on a pool connection (see the "Uniqueness" guide).

        Raises:
            drover.InvalidJobArgs: ``args`` is not a JobArgs or cannot be encoded
                (nothing was written).
            drover.InvalidInsertOpts: ``Unique.by_args`` names a field the args
                class does not have (nothing was written).
            drover.DuplicateJob: the unique key is held by a waiting or running job.
            drover.DatabaseError: the database refused or could not be reached.
        """
        prepared = prepare_one(args, with_options(opts, options), "insert")
        chain = self._insert_chain
        rows = through(chain, prepared, self._write) if chain else self._write(prepared)
        return rows[0] if prepared.last is None else single_result(prepared, rows)

    def _write(self, prepared: Prepared) -> list[JobRow]:
        # The funnel's writer for the client's own transactions.
        route, payload = prepared.route, prepared.payload
        if route == ONE:
            row = self._combiner.insert(payload)
            self._committed((row.queue,))
            return [row]
        if route == UNIQUE:
            row = self._store.insert_unique(payload[0], payload[1])
            if not row.duplicate:
                self._committed((row.queue,))
            return [row]
        if route == MANY:
            if not payload.params:
                return []  # no round trip
            rows = self._store.insert_many(payload)
            self._committed(payload.queues)
            return rows
        rows, _ = self._store.insert_graph(payload, notify=self._config.notify)
        self._nudge()
        return rows

    @overload
    def insert_tx(
        self,
        conn: object,
        args: JobArgs,
        opts: InsertOpts | None = None,
        **options: Unpack[InsertOptions],
    ) -> JobRow: ...
    @overload
    def insert_tx(
        self, conn: object, args: Chain | Group, opts: None = None
    ) -> InsertedWorkflow: ...
    def insert_tx(
        self,
        conn: object,
        args: JobArgs | Chain | Group,
        opts: InsertOpts | None = None,
        **options: Unpack[InsertOptions],
    ) -> JobRow | InsertedWorkflow:
        """Insert one job (or a workflow's jobs) inside the caller's open transaction.

        The job exists if and only if that transaction commits; until then no
        worker can see it. ``conn`` is a psycopg ``Connection`` or ``Cursor``, a
        Django connection or cursor wrapper, or a SQLAlchemy ``Connection`` or
        ``Session`` (``postgresql+psycopg://``). drover opens its own cursor,
        never commits or rolls back, and changes no session settings. A
        duplicate unique key raises ``drover.DuplicateJob`` and leaves the
        caller's transaction usable.

        Raises:
            drover.InvalidJobArgs: bad args, checked before ``conn`` is used.
            drover.NotInTransaction: the connection is in autocommit mode (for
                Django: outside ``transaction.atomic()``), or its transaction
                has already failed.
            drover.UnsupportedConnection: ``conn`` is not one of the above.
            drover.DuplicateJob: the unique key is held by a waiting or running job.
            drover.DatabaseError: the statement failed; the caller's transaction
                is then aborted, as with any failed statement.
        """
        prepared = prepare_one(args, with_options(opts, options), "insert_tx")
        writer = self._caller_writer(conn)
        chain = self._insert_chain
        rows = through(chain, prepared, writer) if chain else writer(prepared)
        return rows[0] if prepared.last is None else single_result(prepared, rows)

    def _caller_writer(self, conn: object) -> tx.CallerWriter:
        return tx.CallerWriter(conn=conn, notify=self._config.notify, ns=self._store.ns)

    def insert_many(self, items: Iterable[InsertItem]) -> list[JobRow]:
        """Insert a batch atomically with COPY and return the rows in input order.

        ``items`` holds ``JobArgs`` or ``(JobArgs, InsertOpts)`` pairs (any
        iterable; it is read once). Every item is validated and encoded before
        anything is sent; a bad item or a unique-key collision (with an
        existing job, or between two items) writes nothing and consumes no
        ids. An empty batch makes no round trip.

        A batch without unique keys is copied straight into the table, four
        round trips whatever its size; one with unique keys goes through a
        staging table (a few more). One where an item uses
        ``InsertOpts.unique``, ``debounce`` or ``throttle`` is inserted item by
        item in one statement instead, and each such item's row may be the job
        that holds its identity, flagged ``row.duplicate`` (an earlier item's
        job included); it may use up ids of the jobs it did not insert. The
        rows are committed when this returns, and each queue gets one wake-up
        after the commit (as for ``insert``).
        Safe to call from several threads; each call holds one pool
        connection.

        Raises:
            drover.InvalidJobArgs: an item is invalid (the message names its index).
            drover.DuplicateJob: an item's unique key is taken.
            drover.DatabaseError: the database refused or could not be reached.
        """
        return through(self._insert_chain, prepare_many(items, "insert_many"), self._write)

    def insert_many_tx(self, conn: object, items: Iterable[InsertItem]) -> list[JobRow]:
        """Insert a batch inside the caller's open transaction (see ``insert_tx``).

        A batch with unique keys runs under a savepoint, so a collision writes
        nothing and leaves the caller's transaction usable; a batch without
        them cannot collide and needs no savepoint (a database error aborts the
        caller's transaction, as any failed statement does). The wake-ups are
        queued inside the transaction and delivered only if it commits.
        Several calls in one transaction are fine.
        """
        prepared = prepare_many(items, "insert_many_tx")
        return through(self._insert_chain, prepared, self._caller_writer(conn))

    def _committed(self, queues: Collection[str]) -> None:
        # Inserts the client commits itself are announced after the commit
        # (see Notifier for why not inside the transaction).
        if self._notifier is not None:
            self._notifier.committed(queues)
        self._nudge()
