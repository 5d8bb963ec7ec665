"""Insert middleware: code that sees, and may change, every batch of jobs before it is written.

Every insert drover makes goes through one funnel (ADR 0047): ``Client``'s
and ``AsyncClient``'s ``insert``, ``insert_tx``, ``insert_many`` and
``insert_many_tx`` (workflows included), ``Inspector.enqueue``, periodic
ticks and the Django and SQLAlchemy helpers. Each call encodes its jobs
into a ``drover.InsertBatch``, passes it through the insert middleware,
then writes it with one writer that picks the statement. An insert
middleware is any object with an ``around_insert`` method:

    class Audit:
        @contextlib.contextmanager
        def around_insert(self, batch: drover.InsertBatch) -> Iterator[None]:
            batch.add_tags("audited")          # before the write: may change the jobs
            yield                               # the write happens here
            log.info("inserted %s", [row.id for row in batch.rows])

    config = drover.Config(middleware=[Audit()])

``around_insert`` returns a context manager: the write runs inside it, so
the code before ``yield`` (``__enter__``) runs before anything is sent and
may change the batch, and the code after it (``__exit__``) sees the rows
(``batch.rows``) or the error. One implementation serves synchronous and
asyncio callers alike: on an ``AsyncClient`` the write is awaited inside
the same ``with``. ``Config.middleware`` holds execution middleware
(callables) and insert middleware (objects with ``around_insert``) in one
list, outermost first; an entry may be both (``drover.contrib.otel.
TracingMiddleware`` is).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, overload, runtime_checkable

from drover._records import InsertParams, UniformBatch
from drover.errors import InvalidArgument, InvalidInsertOpts
from drover.job import InsertOpts, JobRow
from drover.progress import check_tags, encode_meta

__all__ = [
    "InsertBatch",
    "InsertMiddleware",
    "InsertParams",
    "checked_insert_chain",
    "insert_chain",
    "is_insert_middleware",
    "merge_meta",
]


@runtime_checkable
class InsertMiddleware(Protocol):
    """An object that wraps every insert call of the clients configured with it.

    Recognised in ``Config.middleware`` by its ``around_insert`` method
    (``is_insert_middleware``). drover calls ``around_insert(batch)`` once per
    insert call, on the caller's thread (or task), and enters the context
    manager it returns before the write and exits it after: with no
    exception once the rows are in ``batch.rows``, or with the write's
    exception, which goes on to the caller whatever ``__exit__`` returns (a
    middleware cannot swallow it). An exception raised by the middleware
    itself before the write fails the call and writes nothing; one raised
    by ``__exit__`` after a successful write reaches the caller although
    the jobs were written (committed, for the client's own transactions).

    Concurrency: one instance serves every thread and task of every client
    it is configured on; keep per-call state in the context manager.
    """

    def around_insert(self, batch: InsertBatch) -> AbstractContextManager[object]:
        """The context of one insert call's write (see the class)."""
        ...


def is_insert_middleware(entry: object) -> bool:
    """True for a ``Config.middleware`` entry that has a callable ``around_insert``."""
    return callable(getattr(entry, "around_insert", None))


def insert_chain(middleware: Sequence[object]) -> tuple[InsertMiddleware, ...]:
    """The insert middleware among ``middleware`` (``Config.middleware``), in order."""
    return tuple(entry for entry in middleware if is_insert_middleware(entry))  # type: ignore[misc]


def checked_insert_chain(middleware: object, what: str) -> tuple[InsertMiddleware, ...]:
    """``insert_chain`` of a list given outside a ``Config`` (the ``Inspector``, the SQLAlchemy
    helpers): ``InvalidArgument`` for anything but a list of middleware."""
    if isinstance(middleware, str) or not isinstance(middleware, Sequence):
        raise InvalidArgument(
            f"{what} must be a list of middleware, not {type(middleware).__name__}"
        )
    for index, entry in enumerate(middleware):
        if entry is None or not (callable(entry) or is_insert_middleware(entry)):
            raise InvalidArgument(
                f"{what}[{index}] is {entry!r}, neither an insert middleware (an object with "
                "an around_insert method) nor an execution middleware"
            )
    return insert_chain(middleware)


# The fields of InsertParams replace() may change; the InsertOpts field of each name checks it.
_CHANGEABLE = ("queue", "scheduled_at", "max_attempts", "priority", "tags", "meta")


class InsertBatch(Sequence[InsertParams]):
    """The jobs of one insert call, as each insert middleware sees them.

    A sequence of ``drover.InsertParams`` in input order (one for ``insert``
    of a job, every job of a workflow, every item of ``insert_many``),
    built by drover: an insert middleware reads it and may change it before
    the write with ``replace``, ``add_meta`` and ``add_tags``. The kind, the
    args, the unique key and the identity of a job (``InsertOpts.unique``,
    ``debounce``, ``throttle``) and its dependencies cannot change: they
    were checked and decided when the call encoded its input. After the
    write, ``rows`` holds what the call returns.

    Not thread-safe: it belongs to one insert call.
    """

    __slots__ = ("_decorated", "_dirty", "_operation", "_params", "_rows", "_shared_meta")

    def __init__(
        self,
        operation: str,
        params: Sequence[InsertParams],
        *,
        decorated: bool = True,
        shared_meta: str | None = None,
    ) -> None:
        # Built by drover's insert funnel. decorated: some job may have tags
        # or metadata; shared_meta: every job's metadata, when they all have
        # the same and no tags (the direct COPY writes it as one column).
        self._operation = operation
        self._params = params
        self._decorated = decorated
        self._shared_meta = shared_meta
        self._dirty = False
        self._rows: Sequence[JobRow] = ()

    @property
    def operation(self) -> str:
        """The call: ``insert``, ``insert_tx``, ``insert_many`` or ``insert_many_tx`` (of a
        ``Client`` or an ``AsyncClient``, a workflow included; the Django and SQLAlchemy
        helpers are ``insert_tx`` and ``insert_many_tx``), ``enqueue``
        (``Inspector.enqueue``) or ``periodic`` (a periodic job's tick)."""
        return self._operation

    @property
    def rows(self) -> Sequence[JobRow]:
        """The rows the call returns, in input order, once written (empty before).

        A unique insert's row may be the job that already held the identity
        (``row.duplicate``); a periodic tick that a waiting job already held
        returns none.
        """
        return self._rows

    def __len__(self) -> int:
        return len(self._params)

    @overload
    def __getitem__(self, index: int) -> InsertParams: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[InsertParams]: ...
    def __getitem__(self, index: int | slice) -> InsertParams | Sequence[InsertParams]:
        return self._params[index]

    def __iter__(self) -> Iterator[InsertParams]:
        return iter(self._params)

    def __repr__(self) -> str:
        return f"<drover.InsertBatch {self._operation}, {len(self._params)} job(s)>"

    def _list(self) -> list[InsertParams]:
        # Jobs held per item from now on (a uniform batch stores them as texts).
        params = self._params
        if not isinstance(params, list):
            params = self._params = list(params)
        return params

    def replace(self, index: int, **changes: Any) -> None:
        """Change job ``index``'s ``queue``, ``scheduled_at``, ``max_attempts``,
        ``priority``, ``tags`` (replacing its tags) or ``meta`` (a dict, replacing its
        metadata; ``None`` for none).

        Each value is checked as the ``InsertOpts`` field of the same name is;
        ``None`` for ``queue``, ``max_attempts`` or ``priority`` is refused (a
        job has one).

        Raises:
            drover.InvalidInsertOpts: a value ``InsertOpts`` would refuse.
            drover.InvalidArgument: a field that cannot change, or no such job.
        """
        unknown = sorted(set(changes) - set(_CHANGEABLE))
        if unknown:
            raise InvalidArgument(
                f"InsertBatch.replace changes {', '.join(_CHANGEABLE)}; not {', '.join(unknown)}"
            )
        if not isinstance(index, int) or not -len(self._params) <= index < len(self._params):
            raise InvalidArgument(f"InsertBatch.replace: no job at index {index!r}")
        for name in ("queue", "max_attempts", "priority"):
            if name in changes and changes[name] is None:
                raise InvalidInsertOpts(f"InsertBatch.replace: {name} cannot be None")
        checked = InsertOpts(**changes)  # raises InvalidInsertOpts naming the field
        values: dict[str, Any] = {}
        for name in changes:
            value = getattr(checked, name)
            if name == "meta":
                value = None if value is None else encode_meta(value, "InsertOpts.meta")
            values[name] = value
        params = self._list()
        params[index] = params[index]._replace(**values)
        # The funnel works out again which write the batch takes.
        self._dirty = True
        self._decorated = True
        self._shared_meta = None

    def add_meta(self, meta: Mapping[str, Any], *, replace: bool = False) -> None:
        """Merge ``meta``'s keys into every job's metadata.

        A key a job already has keeps the job's value, unless ``replace``.
        ``meta`` is checked as ``InsertOpts.meta`` is (a dict of JSON values,
        at most 64 KiB as JSON). Cheap on a large batch: a batch whose jobs
        had no metadata or tags stays on the direct COPY, writing ``meta``
        once per row.

        Raises:
            drover.InvalidInsertOpts: ``meta`` is not a dict of JSON values.
        """
        try:
            text = encode_meta(meta, "InsertBatch.add_meta")
        except (TypeError, ValueError) as exc:
            raise InvalidInsertOpts(str(exc)) from None
        self._add_members(text[1:-1], replace=replace)

    def _add_members(self, members: str, *, replace: bool = False) -> None:
        # members: JSON object members without the braces (drover's tracing
        # stamps its trace context this way, ADR 0042).
        if not members:
            return
        params = self._params
        if isinstance(params, UniformBatch):
            meta = merge_meta(params.meta, members, replace=replace)
            self._params = UniformBatch(
                params.kind,
                params.queue,
                params.max_attempts,
                params.priority,
                params.args_json,
                meta,
            )
            self._shared_meta = meta
            return
        if not params:
            return
        if self._shared_meta is not None or not self._decorated:
            # Every job has the same metadata (or none) and no tags: they
            # keep sharing one text, and the direct COPY path.
            meta = merge_meta(self._shared_meta, members, replace=replace)
            self._params = [p._replace(meta=meta) for p in params]
            self._shared_meta = meta
            return
        self._params = [
            p._replace(meta=merge_meta(p.meta, members, replace=replace)) for p in params
        ]

    def add_tags(self, *tags: str) -> None:
        """Add ``tags`` to every job's tags (repeats dropped), checked as ``InsertOpts.tags``.

        Raises:
            drover.InvalidInsertOpts: a tag ``InsertOpts`` would refuse, or a job
                would have more than 20.
        """
        if not tags:
            return
        try:
            check_tags(tags, "InsertBatch.add_tags")
            params = self._list()
            for index, p in enumerate(params):
                params[index] = p._replace(
                    tags=check_tags((*p.tags, *tags), "InsertBatch.add_tags")
                )
        except (TypeError, ValueError) as exc:
            raise InvalidInsertOpts(str(exc)) from None
        self._decorated = True
        self._shared_meta = None


def merge_meta(meta: str | None, members: str, *, replace: bool = False) -> str:
    """``meta`` (a JSON object's text, or ``None``) with the object members ``members`` added.

    Added first, so that a key ``meta`` already has wins (jsonb, and
    drover's decoder, keep the last of duplicate keys); last with
    ``replace``.
    """
    if meta is None or meta == "{}":
        return f"{{{members}}}"
    if replace:
        return f"{meta[:-1]},{members}}}"
    return f"{{{members},{meta[1:]}"
