"""A job's unique identity, computed in Python before any I/O (ADR 0031).

The identity is a SHA-256 of canonical JSON (keys sorted, no spaces, UTF-8)
of the form (unique, debounce or throttle), the kind and the parts the
``drover.Unique`` chose: the queue, the args (all, or the named fields), the
explicit key and the period's length. Canonical JSON makes it
deterministic: the same args give the same identity in every process and
every drover version that keeps this encoding (``_VERSION`` is hashed in, so
a change of encoding is a change of identity, never a silent collision).
The period's bucket is not in the hash: the database picks it, on its own
clock, when the row is written.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

from drover._hints import did_you_mean
from drover._records import Identity, JobInsertParams
from drover.errors import InvalidInsertOpts
from drover.job import InsertOpts, JobArgs
from drover.unique import HELD_ALWAYS, STATE_BITS, Unique, state_mask

__all__ = ["identity_of", "needs_identity"]

_VERSION = 1
_DEFAULT = Unique()
_ACTIVE_MASK = state_mask(HELD_ALWAYS)
_ALL_MASK = state_mask(STATE_BITS)
_masks: dict[tuple[str, ...], int] = {}
_checked_fields: set[tuple[type, tuple[str, ...]]] = set()


def needs_identity(opts: InsertOpts | None) -> bool:
    """True when ``opts`` asks for uniqueness by identity, debounce or throttle."""
    return opts is not None and (
        opts.unique is not None or opts.debounce is not None or opts.throttle is not None
    )


def _micros(window: timedelta) -> int:
    return window // timedelta(microseconds=1)


def _check_fields(cls: type[JobArgs], names: tuple[str, ...], where: str) -> None:
    if (cls, names) in _checked_fields:
        return
    fields = sorted(cls.model_fields)
    for name in names:
        if name not in cls.model_fields:
            hint = did_you_mean(name, fields)
            raise InvalidInsertOpts(
                f"{where}Unique.by_args names {name!r}, which is not a field of "
                f"{cls.__qualname__}{hint}; its fields are {', '.join(fields) or 'none'}"
            )
    _checked_fields.add((cls, names))


def identity_of(
    args: JobArgs, params: JobInsertParams, opts: InsertOpts, where: str = ""
) -> Identity:
    """The identity of inserting ``args`` (encoded as ``params``) with ``opts``.

    Raises ``InvalidInsertOpts`` when ``Unique.by_args`` names a field the
    args class does not have.
    """
    unique = opts.unique or _DEFAULT
    args_part: Any = None
    if unique.by_args is True:
        args_part = json.loads(params.args_json)
    elif unique.by_args:
        names = tuple(unique.by_args)
        _check_fields(type(args), names, where)
        decoded = json.loads(params.args_json)
        args_part = {name: decoded.get(name) for name in names}
    if opts.debounce is not None:
        assert isinstance(opts.debounce, timedelta)
        form, mask, window = "d", _ACTIVE_MASK, _micros(opts.debounce)
    elif opts.throttle is not None:
        assert isinstance(opts.throttle, timedelta)
        form, mask, window = "t", _ALL_MASK, _micros(opts.throttle)
    else:
        held = unique.held_in()
        found = _masks.get(held)
        if found is None:
            found = _masks[held] = state_mask(held)
        form, mask, window = "u", found, None
    period = unique.period_window
    period_us = None if period is None else _micros(period)
    document = json.dumps(
        [
            _VERSION,
            form,
            params.kind,
            params.queue if unique.by_queue else None,
            args_part,
            unique.key,
            period_us,
        ],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    digest = hashlib.sha256(document.encode("utf-8")).hexdigest()
    return Identity(digest, period_us, mask, form, window)
