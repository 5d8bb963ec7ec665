"""The insert funnel: the one pipeline every insert goes through (ADR 0047).

    entry point ─► prepare (encode; identity; dependencies) ─► Prepared
                ─► insert middleware (``around_insert``, outermost first)
                ─► a writer: the route's statements on a sync or an async connection

Every insert entry point (``Client`` and ``AsyncClient``'s four methods,
``Inspector.enqueue``, periodic ticks, the Django and SQLAlchemy helpers)
builds a ``Prepared`` with ``prepare_one``, ``prepare_many`` or
``prepare_params`` and passes it, with the writer for its connection, to
``through`` (blocking) or ``athrough`` (asyncio). Everything that decides is
here or below and shared: encoding and validation (``encode``), the unique
identity (``identity``), the graph of a workflow or of ``depends_on``
(``graph``), the route (``Prepared.route``, fixed when the input is
encoded), and each route's statements (``drover._db.insert``, ``unique``,
``graph`` and their plans). A writer only carries the route out on its
connection: the combiner or a pool connection for the client's own
transactions, the caller's connection for ``*_tx``, an async pool or
connection for ``AsyncClient``.

With no insert middleware ``through`` calls the writer at once: an insert
runs exactly the statements it ran before the funnel existed. With some,
the jobs are shown to them as a ``drover.InsertBatch`` and read back from it
before the write (only when a middleware changed them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, NamedTuple

from drover._insert.encode import encode_batch, encode_insert
from drover._insert.graph import encode_dependent, encode_workflow, has_dependencies
from drover._insert.identity import identity_of, needs_identity
from drover._records import EncodedBatch, EncodedGraph, Identity, InsertParams, UniformBatch
from drover.errors import ConfigError, InvalidArgument
from drover.insert_middleware import InsertBatch, InsertMiddleware
from drover.job import InsertItem, InsertOpts, JobArgs, JobRow
from drover.workflows import Chain, Group, InsertedWorkflow

__all__ = [
    "GRAPH",
    "MANY",
    "ONE",
    "UNIQUE",
    "Prepared",
    "athrough",
    "prepare_many",
    "prepare_one",
    "prepare_params",
    "single_result",
    "through",
]

ONE, UNIQUE, MANY, GRAPH = 0, 1, 2, 3
"""The routes: one job (``payload`` an ``InsertParams``), one job with a unique identity
(``(InsertParams, Identity)``), a batch (``EncodedBatch``), jobs with dependencies
(``EncodedGraph``)."""


class Prepared(NamedTuple):
    """One insert call's jobs, encoded, and the route they take to the database."""

    operation: str
    """The call, as ``InsertBatch.operation`` names it."""
    route: int
    payload: Any
    last: list[int] | None = None
    """For a workflow: the indexes of its last jobs (``InsertedWorkflow.last``)."""


def prepare_one(
    args: object, opts: InsertOpts | None, operation: str, *, workflows: bool = True
) -> Prepared:
    """``insert``'s input (a job, or with ``workflows`` a ``chain``/``group``), checked
    and encoded.

    Raises ``drover.InvalidJobArgs``, ``InvalidInsertOpts`` or ``InvalidArgument``
    (options given with a workflow) before anything is written.
    """
    if workflows and isinstance(args, Chain | Group):
        if opts is not None:
            raise InvalidArgument("insert options of a workflow go on its steps")
        graph, last = encode_workflow(args)
        return Prepared(operation, GRAPH, graph, last)
    if opts is not None and has_dependencies(opts):
        return Prepared(operation, GRAPH, encode_dependent([(args, opts)]))  # type: ignore[list-item]
    params = encode_insert(args, opts)
    if opts is not None and needs_identity(opts):
        assert isinstance(args, JobArgs)
        return Prepared(operation, UNIQUE, (params, identity_of(args, params, opts)))
    # Positional, past the named tuple's __new__: the one per-call object.
    return _new(Prepared, (operation, ONE, params, None))


_new = tuple.__new__


def prepare_many(items: Iterable[InsertItem], operation: str) -> Prepared:
    """``insert_many``'s items (read once), checked and encoded: a batch, or a graph when
    an item has ``depends_on``. A bad item raises naming its index; nothing is written."""
    listed, dependent = _split_dependent(items)
    if dependent is not None:
        return Prepared(operation, GRAPH, encode_dependent(dependent, "item"))
    return Prepared(operation, MANY, encode_batch(listed))


def prepare_params(params: InsertParams, operation: str) -> Prepared:
    """One job encoded by its entry point (``Inspector.enqueue``, a periodic tick)."""
    return Prepared(operation, ONE, params)


def single_result(prepared: Prepared, rows: Sequence[JobRow]) -> JobRow | InsertedWorkflow:
    """What ``insert`` returns for ``prepared``: the job's row, or the workflow."""
    if prepared.last is None:
        return rows[0]
    # job_insert_graph gives a workflow its first job's id: min(id) of the
    # ids it draws, in input order.
    workflow_id = min((row.id for row in rows), default=0)
    return InsertedWorkflow(workflow_id, tuple(rows), tuple(rows[i] for i in prepared.last))


def _split_dependent(
    items: object,
) -> tuple[Any, list[tuple[JobArgs, InsertOpts | None]] | None]:
    # insert_many's items read once, and as (args, opts) pairs when one of
    # them waits for other jobs (the batch then goes in as a graph). Anything
    # that is not a list of items is left for the encoder to name.
    if isinstance(items, JobArgs | str | bytes) or not isinstance(items, Iterable):
        return items, None
    listed = items if isinstance(items, list) else list(items)
    # Only a pair can wait for other jobs: a batch of bare args is told by its
    # classes (found in C), without a Python test per item.
    if not any(issubclass(t, tuple) for t in set(map(type, listed))):
        return listed, None
    if not any(isinstance(i, tuple) and len(i) == 2 and has_dependencies(i[1]) for i in listed):
        return listed, None
    return listed, [(i, None) if not isinstance(i, tuple) else i for i in listed]


# --- the middleware ------------------------------------------------------------------------------

Write = Callable[[Prepared], list[JobRow]]
"""A writer: carries a prepared call out on its connection, returns the rows."""

AsyncWrite = Callable[[Prepared], Awaitable[list[JobRow]]]


def through(chain: Sequence[InsertMiddleware], prepared: Prepared, write: Write) -> list[JobRow]:
    """Write ``prepared`` with ``write`` inside ``chain``'s ``around_insert`` contexts."""
    if not chain:
        return write(prepared)
    batch = _batch_of(prepared)
    scopes = _enter(chain, batch)
    try:
        rows = write(_settled(prepared, batch))
    except BaseException as exc:
        _raise_from_exit(scopes, exc)
        raise
    batch._rows = rows
    _raise_from_exit(scopes, None)
    return rows


async def athrough(
    chain: Sequence[InsertMiddleware], prepared: Prepared, write: AsyncWrite
) -> list[JobRow]:
    """``through`` for asyncio: the same contexts, entered and exited on the caller's task
    around the awaited write."""
    if not chain:
        return await write(prepared)
    batch = _batch_of(prepared)
    scopes = _enter(chain, batch)
    try:
        rows = await write(_settled(prepared, batch))
    except BaseException as exc:
        _raise_from_exit(scopes, exc)
        raise
    batch._rows = rows
    _raise_from_exit(scopes, None)
    return rows


_Exit = Callable[
    [Any, type[BaseException] | None, BaseException | None, TracebackType | None], object
]


def _enter(
    chain: Sequence[InsertMiddleware], batch: InsertBatch
) -> list[tuple[AbstractContextManager[object], _Exit]]:
    # As nested with statements: each context entered in turn, outermost
    # first; one that fails to enter exits those already entered.
    scopes: list[tuple[AbstractContextManager[object], _Exit]] = []
    try:
        for middleware in chain:
            scope = middleware.around_insert(batch)
            try:
                enter, exit_ = type(scope).__enter__, type(scope).__exit__
            except AttributeError:
                raise ConfigError(
                    f"{middleware!r}.around_insert returned {scope!r}, not a context manager "
                    "(see drover.InsertMiddleware)"
                ) from None
            enter(scope)
            scopes.append((scope, exit_))
    except BaseException as exc:
        _raise_from_exit(scopes, exc)
        raise
    return scopes


def _raise_from_exit(
    scopes: list[tuple[AbstractContextManager[object], _Exit]], error: BaseException | None
) -> None:
    # Innermost first. An exception an __exit__ raises replaces the one it
    # was given (as in nested with statements) and is raised at the end; an
    # __exit__ that returns True does not swallow the write's error: the
    # caller's `raise` goes on.
    raised = error
    for scope, exit_ in reversed(scopes):
        try:
            if raised is None:
                exit_(scope, None, None, None)
            else:
                exit_(scope, type(raised), raised, raised.__traceback__)
        except BaseException as exc:
            raised = exc
    if raised is not error and raised is not None:
        raise raised


def _batch_of(prepared: Prepared) -> InsertBatch:
    route, payload = prepared.route, prepared.payload
    if route == ONE:
        return InsertBatch(prepared.operation, [payload])
    if route == UNIQUE:
        return InsertBatch(prepared.operation, [payload[0]])
    if route == MANY:
        return InsertBatch(
            prepared.operation,
            payload.params,
            decorated=payload.decorated,
            shared_meta=payload.shared_meta,
        )
    return InsertBatch(prepared.operation, payload.params)


def _settled(prepared: Prepared, batch: InsertBatch) -> Prepared:
    # The payload as the middleware left it; the route stays (what a
    # middleware may change cannot move a call to another route).
    route, payload = prepared.route, prepared.payload
    params = batch._params
    if route == MANY:
        encoded: EncodedBatch = payload
        if batch._dirty:
            return prepared._replace(payload=_reencoded(encoded, params))
        if params is encoded.params:
            return prepared
        return prepared._replace(
            payload=encoded._replace(
                params=params, decorated=batch._decorated, shared_meta=batch._shared_meta
            )
        )
    if route == ONE:
        return prepared if params[0] is payload else prepared._replace(payload=params[0])
    if route == UNIQUE:
        first: InsertParams = payload[0]
        identity: Identity = payload[1]
        return prepared if params[0] is first else prepared._replace(payload=(params[0], identity))
    graph: EncodedGraph = payload
    if params is graph.params and not batch._dirty:
        return prepared
    return prepared._replace(payload=graph._replace(params=list(params)))


def _reencoded(encoded: EncodedBatch, params: Sequence[InsertParams]) -> EncodedBatch:
    # What the encoder would have said of these jobs: which queues, and
    # which COPY path (ADR 0008): a batch with no tags whose jobs all carry
    # the same metadata keeps the direct COPY, writing it as one column.
    if isinstance(params, UniformBatch):
        return encoded._replace(params=params, decorated=False, shared_meta=params.meta)
    queues: set[str] = set()
    unique = timed = tagged = False
    shared = params[0].meta if params else None
    same = True
    for p in params:
        queues.add(p.queue)
        unique = unique or p.unique_key is not None
        timed = timed or p.scheduled_at is not None
        tagged = tagged or bool(p.tags)
        same = same and (p.meta is shared or p.meta == shared)
    if not tagged and same:
        return encoded._replace(
            params=params,
            queues=queues,
            unique=unique,
            timed=timed,
            decorated=False,
            shared_meta=shared,
        )
    decorated = tagged or any(p.meta is not None for p in params)
    return encoded._replace(
        params=params,
        queues=queues,
        unique=unique,
        timed=timed,
        decorated=decorated,
        shared_meta=None,
    )
