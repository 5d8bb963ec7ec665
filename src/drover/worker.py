"""Workers and the registry that maps a job kind to the code that runs it."""

from __future__ import annotations

import abc
import inspect
import threading
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Generic, TypeVar, get_args, get_origin, overload

from drover._durations import to_seconds
from drover.errors import ConfigError
from drover.job import Job, JobArgs

__all__ = ["Worker", "Workers"]

A = TypeVar("A", bound=JobArgs)
W = TypeVar("W", bound="Worker[Any]")
R = TypeVar("R")


class Worker(abc.ABC, Generic[A]):
    """Base class for the code that runs one kind of job.

    Subclass it with the args type as the parameter; drover reads the type
    from the base class, so the registry needs nothing else:

        class SendEmailWorker(drover.Worker[SendEmail]):
            def work(self, job: drover.Job[SendEmail]) -> None:
                send(job.args.to, job.args.subject)

    ``work`` runs on one of the client's pool threads, possibly at the same time
    as other calls on the same instance, so a worker must be thread-safe. Return
    normally to complete the job; raise to fail the attempt. What it returns,
    unless ``None``, is stored as the job's result with the completion (a
    JSON-able value or a pydantic model, see ``Client.result``); one that
    cannot be stored fails the attempt with ``drover.InvalidResult``. Delivery is
    at-least-once: ``work`` can run more than once for one job (after a crash,
    a lost lease or a shutdown that ran out of time), so it must be idempotent.
    ``job.context`` reports cancellation; poll it in long loops.

    ``timeout`` (a ``timedelta`` or seconds) optionally bounds one execution's
    context deadline.

    ``work`` may be ``async def``: the job then runs as a task on the
    client's event loop (one loop thread per client) and holds no pool
    thread while it awaits. Timeouts, shutdown and operator cancels cancel
    the task (``asyncio.CancelledError`` at its current ``await``); a call
    that blocks the loop delays every async job and is logged (see
    docs/async.md).
    """

    args_type: ClassVar[type[JobArgs]]
    timeout: ClassVar[timedelta | float | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if get_origin(base) is Worker:
                (arg,) = get_args(base)
                if isinstance(arg, type) and issubclass(arg, JobArgs):
                    cls.args_type = arg
                    return
                if isinstance(arg, TypeVar) or arg is Any:
                    return  # still generic, or bound per instance (function workers)
                raise TypeError(
                    f"{cls.__qualname__}: Worker[...] needs a drover.JobArgs subclass, got {arg!r}"
                )

    @abc.abstractmethod
    def work(self, job: Job[A]) -> object:
        """Run one job. Raise to fail this attempt; return to complete it (with a result)."""


@dataclass(frozen=True, slots=True)
class _Registration:
    args_type: type[JobArgs]
    worker: Worker[Any]
    is_async: bool


class _FunctionWorker(Worker[Any]):
    """Adapts ``def f(job: Job[T]) -> None`` to the Worker interface."""

    def __init__(self, fn: Callable[[Job[Any]], object], args_type: type[JobArgs]) -> None:
        self._fn = fn
        self.args_type = args_type  # type: ignore[misc]  # per-instance for function workers

    def work(self, job: Job[Any]) -> object:
        return self._fn(job)

    def __repr__(self) -> str:
        return f"<function worker {getattr(self._fn, '__qualname__', self._fn)!r}>"


class _AsyncFunctionWorker(_FunctionWorker):
    """Adapts ``async def f(job: Job[T]) -> None`` to the Worker interface."""

    async def work(self, job: Job[Any]) -> object:
        value: Any = self._fn(job)
        return await value


def _args_type_from_annotation(fn: Callable[..., object]) -> type[JobArgs]:
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise ConfigError(
            f"cannot read the annotations of {name}: {exc}; "
            "use @workers.register(args=YourArgs) instead"
        ) from exc
    hints.pop("return", None)
    if len(hints) != 1:
        raise ConfigError(
            f"{name} must take exactly one annotated parameter, job: drover.Job[YourArgs]"
        )
    (annotation,) = hints.values()
    if get_origin(annotation) is Job:
        (arg,) = get_args(annotation)
        if isinstance(arg, type) and issubclass(arg, JobArgs):
            return arg
    raise ConfigError(
        f"{name}'s parameter must be annotated drover.Job[YourArgs], not {annotation!r}"
    )


_MAX_TIMEOUT_SECONDS = 3650 * 86400.0


def _is_args_class(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, JobArgs)


class Workers:
    """The registry of workers a client runs, keyed by job kind.

    Register class-based workers with ``add`` and functions with
    ``register``. Registering a second worker for a kind raises
    ``drover.ConfigError`` at once. Registration is thread-safe, but a
    registry is meant to be filled before the client starts.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_kind: dict[str, _Registration] = {}

    def add(self, worker: W) -> W:
        """Register ``worker`` for its args type's kind and return it."""
        if not isinstance(worker, Worker):
            raise ConfigError(
                f"Workers.add needs a drover.Worker instance, not {type(worker).__name__}"
            )
        args_type = getattr(worker, "args_type", None)
        if args_type is None:
            raise ConfigError(
                f"{type(worker).__qualname__} does not name its args type: "
                "subclass drover.Worker[YourArgs]"
            )
        self._register(args_type, worker)
        return worker

    @overload
    def register(self, fn: Callable[[Job[A]], R], /) -> Callable[[Job[A]], R]: ...

    @overload
    def register(
        self, /, *, args: type[A]
    ) -> Callable[[Callable[[Job[A]], R]], Callable[[Job[A]], R]]: ...

    def register(
        self, fn: Callable[[Job[A]], object] | None = None, /, *, args: type[A] | None = None
    ) -> Any:
        """Register a function (``def`` or ``async def``) as the worker for a kind; a decorator.

        ``@workers.register`` reads the args type from the ``job: drover.Job[T]``
        annotation; ``@workers.register(args=T)`` names it explicitly. The
        function is returned unchanged, so it stays callable in tests. What
        it returns is its job's result (see ``Worker``).
        """

        if args is not None and not _is_args_class(args):
            raise ConfigError(f"args= must be a drover.JobArgs subclass, not {args!r}")

        def decorate(func: Callable[[Job[A]], object]) -> Callable[[Job[A]], object]:
            if not callable(func):
                raise ConfigError(f"Workers.register needs a function, not {type(func).__name__}")
            args_type = args if args is not None else _args_type_from_annotation(func)
            if inspect.iscoroutinefunction(func):
                self._register(args_type, _AsyncFunctionWorker(func, args_type))
            else:
                self._register(args_type, _FunctionWorker(func, args_type))
            return func

        if fn is None:
            return decorate
        return decorate(fn)

    def _register(self, args_type: type[JobArgs], worker: Worker[Any]) -> None:
        kind = getattr(args_type, "kind", None)
        if not isinstance(kind, str) or not kind:
            raise ConfigError(
                f"{args_type.__qualname__} has no job kind; workers need a concrete JobArgs class"
            )
        timeout = getattr(worker, "timeout", None)
        if timeout is not None:
            name = f"{type(worker).__qualname__}.timeout"
            if to_seconds(timeout, name) > _MAX_TIMEOUT_SECONDS:
                raise ConfigError(f"{name} must be at most ten years, not {timeout!r}")
        with self._lock:
            existing = self._by_kind.get(kind)
            if existing is not None:
                raise ConfigError(
                    f'a worker is already registered for kind "{kind}" ({existing.worker!r})'
                )
            is_async = inspect.iscoroutinefunction(worker.work)
            self._by_kind[kind] = _Registration(args_type, worker, is_async)

    def get(self, kind: str) -> tuple[type[JobArgs], Worker[Any]] | None:
        """Return ``(args_type, worker)`` for ``kind``, or ``None`` if unregistered."""
        entry = self._by_kind.get(kind)
        return None if entry is None else (entry.args_type, entry.worker)

    def is_async(self, kind: str) -> bool:
        """True when ``kind``'s worker is ``async def`` (it runs on the client's event loop)."""
        entry = self._by_kind.get(kind)
        return entry is not None and entry.is_async

    def async_kinds(self) -> list[str]:
        """The kinds whose worker is ``async def``, sorted."""
        return sorted(k for k, e in self._by_kind.items() if e.is_async)

    def kinds(self) -> list[str]:
        """The registered kinds, sorted."""
        return sorted(self._by_kind)

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_kind

    def __len__(self) -> int:
        return len(self._by_kind)

    def __iter__(self) -> Iterator[str]:
        return iter(self.kinds())
