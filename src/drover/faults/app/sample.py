"""What ``drover faults --app`` runs and checks: the args per kind, and the user's effect checks.

The user says what to insert in one of two ways:

- a factory (``--args module:attr``): a callable ``(kind, rng) -> JobArgs |
  None`` (None: that kind is not sampled), or a mapping from kind to a
  callable ``(rng) -> JobArgs`` or to a sequence of ``JobArgs`` (cycled);
- real rows (``--sample-from URL``): the newest N jobs of each kind of a
  real drover database, read through ``drover.Inspector`` (read only).

An effect check (``--effects module:attr``) is a callable
``(job: SampledJob) -> int`` returning how many times the job's effect
happened, or a mapping from kind to one. Everything wrong with what the user
gave raises ``drover.InvalidArgument`` naming the kind and what was wrong.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import drover

__all__ = [
    "EffectCheck",
    "SampledJob",
    "check_args_source",
    "effect_checks",
    "sample_args",
    "sample_from",
]


@dataclass(frozen=True)
class SampledJob:
    """One job of the run, as an effect check sees it (after the final drain).

    ``id`` is the job's id in the throwaway database (what a handler sees as
    ``job.id``), ``args`` its typed args, ``state`` and ``attempt`` its
    final row's.
    """

    id: int
    kind: str
    args: drover.JobArgs
    state: str
    attempt: int


EffectCheck = Callable[[SampledJob], int]
"""Counts the effects of one job: 1 for a job whose effect happened once."""


def _args_type(workers: drover.Workers, kind: str) -> type[drover.JobArgs]:
    entry = workers.get(kind)
    if entry is None:
        raise drover.InvalidArgument(
            f"kind {kind!r} has no worker in --app (its kinds: {', '.join(workers.kinds())})"
        )
    return entry[0]


def _checked(kind: str, args_type: type[drover.JobArgs], value: object, where: str) -> Any:
    if not isinstance(value, args_type):
        raise drover.InvalidArgument(
            f"{where} gave {type(value).__qualname__} for kind {kind!r}; "
            f"expected a {args_type.__qualname__}"
        )
    return value


def check_args_source(source: object, workers: drover.Workers) -> None:
    """Refuse (``drover.InvalidArgument``) an args source of the wrong shape, calling nothing."""
    if isinstance(source, Mapping):
        for kind, entry in source.items():
            _args_type(workers, str(kind))
            if not callable(entry) and (
                not isinstance(entry, Sequence) or isinstance(entry, str | bytes)
            ):
                raise drover.InvalidArgument(
                    f"--args[{kind!r}] is a {type(entry).__qualname__}; it must be a callable "
                    "(rng) -> JobArgs or a list of JobArgs"
                )
    elif not callable(source):
        raise drover.InvalidArgument(
            f"--args names a {type(source).__qualname__}; it must be a callable (kind, rng) -> "
            "JobArgs | None or a mapping from kind to a callable or a list"
        )


def sample_args(
    source: object, workers: drover.Workers, per_kind: int, rng: random.Random
) -> dict[str, list[drover.JobArgs]]:
    """``per_kind`` args for each kind ``source`` covers (a factory or a mapping, see above).

    Kinds the source does not cover are absent from the result. Raises
    ``drover.InvalidArgument`` for a source of the wrong shape, a mapping key
    that is no registered kind, an empty sequence, or a value that is not the
    kind's args class; an exception raised by the user's factory propagates.
    """
    if per_kind < 1:
        raise drover.InvalidArgument(f"--sample must be 1 or more, not {per_kind}")
    out: dict[str, list[drover.JobArgs]] = {}
    if isinstance(source, Mapping):
        for kind, entry in source.items():
            args_type = _args_type(workers, str(kind))
            where = f"--args[{kind!r}]"
            if callable(entry):
                out[kind] = [_checked(kind, args_type, entry(rng), where) for _ in range(per_kind)]
            elif isinstance(entry, Sequence) and not isinstance(entry, str | bytes):
                if not entry:
                    raise drover.InvalidArgument(f"{where} is empty: give at least one args")
                items = [_checked(kind, args_type, item, where) for item in entry]
                out[kind] = [items[n % len(items)] for n in range(per_kind)]
            else:
                raise drover.InvalidArgument(
                    f"{where} is a {type(entry).__qualname__}; it must be a callable (rng) -> "
                    "JobArgs or a list of JobArgs"
                )
        return out
    if not callable(source):
        raise drover.InvalidArgument(
            f"--args names a {type(source).__qualname__}; it must be a callable (kind, rng) -> "
            "JobArgs | None or a mapping from kind to a callable or a list"
        )
    for kind in workers.kinds():
        args_type = _args_type(workers, kind)
        first = source(kind, rng)
        if first is None:
            continue
        items = [_checked(kind, args_type, first, "--args")]
        items += [
            _checked(kind, args_type, source(kind, rng), "--args") for _ in range(per_kind - 1)
        ]
        out[kind] = items
    return out


def sample_from(
    database_url: str, workers: drover.Workers, per_kind: int
) -> dict[str, list[drover.JobArgs]]:
    """The args of the newest ``per_kind`` jobs (at most 1000) of each kind in a real database.

    Read only, through ``drover.Inspector``; kinds without jobs there are
    absent. Args that no longer decode into the kind's class are skipped.
    Raises ``drover.DatabaseError`` if that database cannot be read.
    """
    if not 1 <= per_kind <= 1000:
        raise drover.InvalidArgument(f"--sample must be from 1 to 1000, not {per_kind}")
    out: dict[str, list[drover.JobArgs]] = {}
    with drover.Inspector(database_url) as inspector:
        for kind in workers.kinds():
            args_type = _args_type(workers, kind)
            decoded = []
            for row in inspector.list_jobs(kind=kind, limit=per_kind):
                try:
                    decoded.append(args_type.model_validate(row.args))
                except Exception:  # noqa: S112 - an old row of another shape is no sample
                    continue
            if decoded:
                out[kind] = decoded
    return out


def effect_checks(source: object, workers: drover.Workers) -> dict[str, EffectCheck]:
    """The effect check of each kind: one callable for every kind, or a mapping kind → callable."""
    if isinstance(source, Mapping):
        checks: dict[str, EffectCheck] = {}
        for kind, check in source.items():
            _args_type(workers, str(kind))
            if not callable(check):
                raise drover.InvalidArgument(
                    f"--effects[{kind!r}] is a {type(check).__qualname__}; it must be a callable "
                    "(job) -> int"
                )
            checks[str(kind)] = check
        return checks
    if not callable(source):
        raise drover.InvalidArgument(
            f"--effects names a {type(source).__qualname__}; it must be a callable (job) -> int "
            "or a mapping from kind to one"
        )
    return dict.fromkeys(workers.kinds(), source)
