"""Validation and encoding of one insert request, before any database work."""

from __future__ import annotations

from drover._db.store import JobInsertParams
from drover.errors import InvalidJobArgs
from drover.job import InsertOpts, JobArgs

__all__ = ["DEFAULT_MAX_ATTEMPTS", "DEFAULT_QUEUE", "encode_insert"]

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 25


def encode_insert(args: object, opts: InsertOpts | None, where: str = "") -> JobInsertParams:
    """Check ``args`` and ``opts`` and encode them; raise a drover error naming the problem.

    ``where`` prefixes messages (``"item 3: "`` in a batch).
    """
    if not isinstance(args, JobArgs):
        raise InvalidJobArgs(
            f"{where}job args must be a drover.JobArgs instance, not {type(args).__qualname__}"
        )
    if opts is not None and not isinstance(opts, InsertOpts):
        raise InvalidJobArgs(
            f"{where}insert options must be a drover.InsertOpts, not {type(opts).__qualname__}"
        )
    cls = type(args)
    kind = getattr(cls, "kind", None)
    if not isinstance(kind, str) or not kind:
        raise InvalidJobArgs(f"{where}{cls.__qualname__} has no job kind")
    try:
        args_json = args.model_dump_json()
    except Exception as exc:  # pydantic raises several types here
        raise InvalidJobArgs(f'{where}cannot encode args for kind "{kind}": {exc}') from None
    if "\\u0000" in args_json:
        # PostgreSQL's jsonb cannot store NUL; refuse here rather than fail mid-transaction.
        raise InvalidJobArgs(
            f'{where}cannot encode args for kind "{kind}": a string contains a NUL character'
        )
    opts = opts or InsertOpts()
    return JobInsertParams(
        kind=kind,
        queue=opts.queue or cls.default_queue or DEFAULT_QUEUE,
        args_json=args_json,
        max_attempts=opts.max_attempts or cls.default_max_attempts or DEFAULT_MAX_ATTEMPTS,
        scheduled_at=opts.scheduled_at,
        unique_key=opts.unique_key or None,
    )
