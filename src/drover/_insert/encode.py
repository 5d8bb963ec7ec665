"""Validation and encoding of insert requests, before any database work."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from drover._insert.identity import identity_of, needs_identity
from drover._records import EncodedBatch, Identity, JobInsertParams, UniformBatch
from drover.errors import InvalidInsertOpts, InvalidJobArgs
from drover.job import DEFAULT_PRIORITY, InsertOpts, JobArgs
from drover.progress import encode_meta

__all__ = ["DEFAULT_MAX_ATTEMPTS", "DEFAULT_QUEUE", "encode_batch", "encode_insert"]

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 25

# (kind, queue, max_attempts, priority) an args class inserts with when no InsertOpts
# says otherwise.
_Defaults = tuple[str, str, int, int]


# Per args class, once it has been checked: classes are few and long-lived.
_known: dict[type, _Defaults] = {}


def _class_defaults(cls: type, where: str) -> _Defaults:
    known = _known.get(cls)
    if known is not None:
        return known
    if not issubclass(cls, JobArgs):
        raise InvalidJobArgs(
            f"{where}job args must be a drover.JobArgs instance, not {cls.__qualname__}"
        )
    kind = getattr(cls, "kind", None)
    if not isinstance(kind, str) or not kind:
        raise InvalidJobArgs(f"{where}{cls.__qualname__} has no job kind")
    known = _known[cls] = (
        kind,
        cls.default_queue or DEFAULT_QUEUE,
        cls.default_max_attempts or DEFAULT_MAX_ATTEMPTS,
        DEFAULT_PRIORITY if cls.default_priority is None else cls.default_priority,
    )
    return known


# PostgreSQL's jsonb cannot store NUL: refuse it here rather than fail mid-transaction.
_NUL_MESSAGE = 'cannot encode args for kind "{kind}": a string contains a NUL character'


_NONFINITE_MESSAGE = (
    'cannot encode args for kind "{kind}": a float is NaN or infinite, which JSON cannot store'
)


def _refuse_constant(token: str) -> Any:
    raise ValueError(token)


def _has_nonfinite(args_json: str) -> bool:
    """True if the JSON text holds a NaN or Infinity number (not merely the word in a string)."""
    if "NaN" not in args_json and "Infinity" not in args_json:
        return False  # the common case: one substring scan, no parse
    try:
        json.loads(args_json, parse_constant=_refuse_constant)
    except ValueError:
        return True
    return False


def _dump(args: JobArgs, kind: str, where: str) -> str:
    try:
        # What model_dump_json() does with its defaults, without the keyword
        # plumbing that costs more than the serialisation of a small model.
        args_json = args.__pydantic_serializer__.to_json(args).decode()
    except Exception as exc:  # pydantic raises several types here
        raise InvalidJobArgs(f'{where}cannot encode args for kind "{kind}": {exc}') from None
    if "\\u0000" in args_json:
        raise InvalidJobArgs(where + _NUL_MESSAGE.format(kind=kind))
    if _has_nonfinite(args_json):
        raise InvalidJobArgs(where + _NONFINITE_MESSAGE.format(kind=kind))
    return args_json


def _apply(defaults: _Defaults, args_json: str, opts: object, where: str) -> JobInsertParams:
    kind, queue, max_attempts, priority = defaults
    if opts is None:
        return JobInsertParams(kind, queue, args_json, max_attempts, None, None, priority)
    if not isinstance(opts, InsertOpts):
        raise InvalidJobArgs(
            f"{where}insert options must be a drover.InsertOpts, not {type(opts).__qualname__}"
        )
    return JobInsertParams(
        kind,
        opts.queue or queue,
        args_json,
        opts.max_attempts or max_attempts,
        _due(opts),
        opts.unique_key or None,
        priority if opts.priority is None else opts.priority,
        opts.tags,  # type: ignore[arg-type]  # a tuple once InsertOpts checked it
        None if opts.meta is None else _meta(opts.meta, where),
    )


def _due(opts: InsertOpts) -> datetime | None:
    # A delay counts from this insert (InsertOpts keeps it as a timedelta).
    delay = opts.delay
    if not delay:
        return opts.scheduled_at
    assert isinstance(delay, timedelta)
    return datetime.now(UTC) + delay


def _meta(meta: object, where: str) -> str:
    # Checked when the InsertOpts was built; checked again here, as the dict
    # may have been changed since.
    try:
        return encode_meta(meta, "InsertOpts.meta")
    except (TypeError, ValueError) as exc:
        raise InvalidInsertOpts(f"{where}{exc}") from None


def encode_insert(args: object, opts: InsertOpts | None, where: str = "") -> JobInsertParams:
    """Check ``args`` and ``opts`` and encode them; raise a drover error naming the problem.

    ``where`` prefixes messages (``"item 3: "`` in a batch).
    """
    if opts is not None and not isinstance(opts, InsertOpts):
        raise InvalidJobArgs(
            f"{where}insert options must be a drover.InsertOpts, not {type(opts).__qualname__}"
        )
    defaults = _class_defaults(type(args), where)
    assert isinstance(args, JobArgs)
    return _apply(defaults, _dump(args, defaults[0], where), opts, where)


def encode_batch(items: object) -> EncodedBatch:
    """Encode every element of an ``insert_many`` batch; the first bad one raises.

    Elements are ``JobArgs`` or ``(JobArgs, InsertOpts | None)`` pairs. Messages
    name the element's index. Class checks are made once per args class. The
    result also says which queues the batch touches and whether any item has
    a unique key or a time, so the writer need not scan the batch again.
    """
    if isinstance(items, JobArgs | str | bytes) or not isinstance(items, Iterable):
        raise InvalidJobArgs(
            f"insert_many needs a list of JobArgs or (JobArgs, InsertOpts) pairs, "
            f"not {type(items).__qualname__}"
        )
    if type(items) is list and items:
        uniform = _uniform(items)
        if uniform is not None:
            return uniform
    return _encode_items(items)


def _uniform(items: list[Any]) -> EncodedBatch | None:
    """The common batch, a list of bare args of one class, encoded a list at a time.

    ``None`` when the batch is anything else, or when any check fails: the
    item-by-item loop (``_encode_items``) then runs and names the bad item.
    Every check of that loop is made here too, once over the whole batch:
    the class (once), serialisation (pydantic, item by item in C), and the
    NUL and NaN/Infinity refusals (a substring scan of all the texts at
    once; a hit, even one inside a string, hands over to the exact checks).
    """
    cls = type(items[0])
    # One args class throughout (a subclass is a class of its own), found in C.
    if not issubclass(cls, JobArgs) or len(set(map(type, items))) != 1:
        return None
    try:
        defaults = _class_defaults(cls, "")
        texts = list(map(bytes.decode, map(cls.__pydantic_serializer__.to_json, items)))
    except Exception:  # the loop raises the right error, naming the item
        return None
    blob = "".join(texts)
    if "\\u0000" in blob or "NaN" in blob or "Infinity" in blob:
        return None
    kind, queue, max_attempts, priority = defaults
    return EncodedBatch(
        UniformBatch(kind, queue, max_attempts, priority, texts), {queue}, False, False
    )


def _encode_items(items: Iterable[Any]) -> EncodedBatch:
    """``encode_batch`` item by item: any batch, and the one that names a bad item."""
    # Per args class: its insert defaults and its serializer. Most batches
    # hold one class and no options: their items stay bare JSON texts (a
    # UniformBatch) until an item of another class or with options arrives.
    # This loop is the whole of insert_many's per-item Python before the COPY.
    known: dict[type, tuple[_Defaults, Callable[[Any], bytes]]] = {}
    texts: list[str] = []
    first: tuple[type, _Defaults] | None = None
    encoded: list[JobInsertParams] | None = None  # once the batch is not uniform
    queues: set[str] = set()
    unique = timed = decorated = False
    identities: dict[int, Identity] | None = None
    new = tuple.__new__
    index = 0
    try:
        for index, item in enumerate(items):
            if isinstance(item, tuple):
                if len(item) != 2:
                    raise InvalidJobArgs(f"expected (JobArgs, InsertOpts), got a {len(item)}-tuple")
                if encoded is None:
                    encoded = _spill(first, texts)
                args, opts = item
                defaults = _class_defaults(type(args), "")
                params = _apply(defaults, _dump(args, defaults[0], ""), opts, "")
                if needs_identity(opts):
                    assert isinstance(opts, InsertOpts)
                    assert isinstance(args, JobArgs)
                    if identities is None:
                        identities = {}
                    identities[index] = identity_of(args, params, opts, f"item {index}: ")
                queues.add(params.queue)
                unique = unique or params.unique_key is not None
                timed = timed or params.scheduled_at is not None
                decorated = decorated or bool(params.tags) or params.meta is not None
                encoded.append(params)
                continue
            cls = type(item)
            found = known.get(cls)
            if found is None:
                found = known[cls] = (
                    _class_defaults(cls, ""),
                    item.__pydantic_serializer__.to_json,
                )
                queues.add(found[0][1])
            defaults, to_json = found
            try:
                args_json = to_json(item).decode()
            except Exception as exc:  # pydantic raises several types here
                kind = defaults[0]
                raise InvalidJobArgs(f'cannot encode args for kind "{kind}": {exc}') from None
            if "\\u0000" in args_json:
                raise InvalidJobArgs(_NUL_MESSAGE.format(kind=defaults[0]))
            if _has_nonfinite(args_json):
                raise InvalidJobArgs(_NONFINITE_MESSAGE.format(kind=defaults[0]))
            if encoded is None:
                if first is None:
                    first = (cls, defaults)
                if cls is first[0]:
                    texts.append(args_json)
                    continue
                encoded = _spill(first, texts)
            kind, queue, max_attempts, priority = defaults
            encoded.append(
                new(
                    JobInsertParams,
                    (kind, queue, args_json, max_attempts, None, None, priority, (), None),
                )
            )
    except InvalidJobArgs as exc:
        # Only a failure pays for formatting the position into the message.
        raise InvalidJobArgs(f"item {index}: {exc}") from None
    if encoded is not None:
        return EncodedBatch(encoded, queues, unique, timed, decorated, identities)
    if first is None:
        return EncodedBatch([], queues, unique, timed)
    kind, queue, max_attempts, priority = first[1]
    return EncodedBatch(
        UniformBatch(kind, queue, max_attempts, priority, texts), queues, unique, timed
    )


def _spill(first: tuple[type, _Defaults] | None, texts: list[str]) -> list[JobInsertParams]:
    """The uniform items read so far, as one JobInsertParams each."""
    if first is None:
        return []
    kind, queue, max_attempts, priority = first[1]
    return [
        JobInsertParams(kind, queue, text, max_attempts, None, None, priority) for text in texts
    ]
