"""Job arguments: ``JobArgs`` and the checks on the names and values a job is declared with.

Separate from ``drover.job`` because the args class is a family of its own:
the pydantic model, its class keywords, the refusal of unknown fields with a
"did you mean" hint, and the checks (queue and kind names, ``max_attempts``,
``priority``) that ``InsertOpts`` applies to the same values. Every name here
is re-exported by ``drover.job``, the path callers import from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from drover._hints import did_you_mean
from drover.errors import InvalidJobArgs
from drover.limits import Limit, limits_tuple

__all__ = [
    "DEFAULT_PRIORITY",
    "MAX_KIND_LENGTH",
    "MAX_PRIORITY",
    "MAX_QUEUE_LENGTH",
    "MIN_PRIORITY",
    "JobArgs",
]

MAX_QUEUE_LENGTH = 128
MAX_KIND_LENGTH = 255
MIN_PRIORITY = -100
"""The lowest priority a job can have: claimed after every other due job of its queue."""
MAX_PRIORITY = 100
"""The highest priority a job can have: claimed before every other due job of its queue."""
DEFAULT_PRIORITY = 0
"""The priority of a job whose args class and insert options name none."""


def _check_name(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{what} must not be empty")
    if len(value) > limit:
        raise ValueError(f"{what} is {len(value)} characters long; the maximum is {limit}")
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters")
    _check_utf8(value, what)
    return value


def _check_utf8(value: str, what: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid UTF-8 text (it holds a lone surrogate)") from None


def _check_max_attempts(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not 1 <= value <= 2**31 - 1:
        raise ValueError(f"{what} must be between 1 and 2147483647, not {value}")
    return value


def _check_priority(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise ValueError(
            f"{what} must be between {MIN_PRIORITY} and {MAX_PRIORITY} "
            f"(higher runs first), not {value}"
        )
    return value


def _unknown_keys(exc: ValidationError) -> list[str]:
    """The top-level keys an `extra="forbid"` model refused, in the order given."""
    return [
        str(error["loc"][0])
        for error in exc.errors()
        if error["type"] == "extra_forbidden" and len(error["loc"]) == 1
    ]


def _accepted_names(cls: type[BaseModel]) -> list[str]:
    """The keyword names a model's constructor takes: its fields, or their aliases."""
    names: list[str] = []
    for name, info in cls.model_fields.items():
        alias = info.validation_alias if isinstance(info.validation_alias, str) else info.alias
        names.append(alias or name)
        if alias and alias != name and cls.model_config.get("populate_by_name"):
            names.append(name)
    return names


class JobArgs(BaseModel):
    """Base class for a job's arguments: a frozen pydantic model with a ``kind``.

    Declare the kind, and optionally insert defaults, as class keywords:

        class SendEmail(drover.JobArgs, kind="send_email", queue="email", max_attempts=5):
            to: str
            subject: str

    ``kind`` names the job type in the database and selects the worker; it is
    checked when the class is defined (missing or empty raises
    ``drover.InvalidJobArgs``, a ``TypeError``).
    A base class meant only to be subclassed passes ``abstract=True`` instead.
    ``queue``, ``max_attempts`` and ``priority`` are defaults that
    ``InsertOpts`` can override per insert. ``priority`` is an int from -100
    to 100 (default 0): within a queue, due jobs of a higher priority are
    claimed first. A value out of range or not an int raises
    ``drover.InvalidJobArgs`` when the class is defined.

    Instances are validated when constructed and encoded to JSON on insert
    (the JSON ``model_dump_json()`` gives); a worker validates the stored JSON
    back into the class (``model_validate``) before the handler runs.

    Unknown fields: constructing an instance with a field the class does not
    have (`SendEmail(to="a", subjet="hi")`) raises `drover.InvalidJobArgs`
    naming it and the closest field, where pydantic's default would drop it
    silently. JSON given to `drover enqueue` / `Inspector.enqueue` is refused
    the same way. Stored args are decoded leniently: a key the class no longer
    has (a row written by an older producer, during a rolling deploy) is
    ignored, so removing a field never kills the jobs already queued; add
    fields only with defaults, so that older rows still validate. To accept
    and drop unknown fields at construction too, declare the class with
    `extra="ignore"` (`class SendEmail(drover.JobArgs, kind="send_email",
    extra="ignore")`); `extra="allow"` keeps them and stores them. Other
    validation errors (a missing field, a wrong type) are pydantic's
    `ValidationError`, as for any pydantic model.
    """

    # NaN and infinities are written as JSON constants, never silently as null:
    # the encoder then refuses them (jsonb has no such numbers). Unknown fields
    # are refused when constructing; model_validate (decoding) drops them.
    model_config = ConfigDict(frozen=True, ser_json_inf_nan="constants", extra="forbid")

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            unknown = _unknown_keys(exc)
            if not unknown:
                raise
            raise InvalidJobArgs(_unknown_message(type(self), unknown, exc)) from None

    # pydantic runs a model's own __init__ from model_validate too, unless it is
    # marked as the base one (RootModel marks its own the same way). Construction
    # goes through this __init__; decoding stored args (model_validate) must not.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Self:
        """Validate stored or given data into the class, ignoring top-level keys it does not have.

        The worker decodes a claimed job's stored args with this. A key the
        class does not declare is dropped rather than refused: a row written by
        an older producer may carry a field that was removed since. Every other
        rule of the class applies (pydantic's `ValidationError` otherwise);
        an explicit `extra=` (pydantic 2.11 and later) is honoured as given.
        """
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as exc:
            if kwargs.get("extra") is not None or not isinstance(obj, Mapping):
                raise
            unknown = set(_unknown_keys(exc))
            if not unknown:
                raise
            known = {key: value for key, value in obj.items() if key not in unknown}
            return super().model_validate(known, **kwargs)

    kind: ClassVar[str]
    default_queue: ClassVar[str | None] = None
    default_max_attempts: ClassVar[int | None] = None
    default_priority: ClassVar[int | None] = None
    declared_limits: ClassVar[tuple[Limit, ...]] = ()
    """Cluster-wide limits on this kind (class keyword `limits=`), inherited by subclasses."""

    def __init_subclass__(
        cls,
        *,
        kind: str | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        priority: int | None = None,
        limits: Limit | Sequence[Limit] | None = None,
        abstract: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        try:
            if limits is not None:
                cls.declared_limits = limits_tuple(limits, f"{cls.__qualname__} limits")
            if kind is not None:
                cls.kind = _check_name(kind, f"{cls.__qualname__} kind", MAX_KIND_LENGTH)
            if queue is not None:
                cls.default_queue = _check_name(
                    queue, f"{cls.__qualname__} queue", MAX_QUEUE_LENGTH
                )
            if max_attempts is not None:
                cls.default_max_attempts = _check_max_attempts(
                    max_attempts, f"{cls.__qualname__} max_attempts"
                )
            if priority is not None:
                cls.default_priority = _check_priority(priority, f"{cls.__qualname__} priority")
        except (TypeError, ValueError) as exc:
            raise InvalidJobArgs(str(exc)) from None
        if abstract:
            return
        current = getattr(cls, "kind", None)
        if not isinstance(current, str) or not current.strip():
            raise InvalidJobArgs(
                f"{cls.__qualname__} needs a job kind: "
                f'class {cls.__name__}(drover.JobArgs, kind="...")'
            )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        # Runs once pydantic has built the fields, which __init_subclass__
        # cannot see: a limit's partition field must be one of them.
        super().__pydantic_init_subclass__(**kwargs)
        _check_partition_fields(cls)


def _check_partition_fields(cls: type[JobArgs]) -> None:
    fields = set(cls.model_fields)
    for limit in cls.declared_limits:
        field = limit.partition_by
        if field is not None and field not in fields:
            hint = did_you_mean(field, fields)
            raise InvalidJobArgs(
                f"{cls.__qualname__} limits: partition_by={field!r} is not one of its fields"
                f"{hint}; its fields are {', '.join(sorted(fields)) or 'none'}"
            )


def _unknown_message(cls: type[JobArgs], unknown: list[str], exc: ValidationError) -> str:
    accepted = _accepted_names(cls)
    parts = []
    for key in unknown:
        parts.append(repr(key) + did_you_mean(key, accepted))
    noun = "an unknown field" if len(unknown) == 1 else "unknown fields"
    message = (
        f"{cls.__qualname__} got {noun} {', '.join(parts)}; its fields are "
        f"{', '.join(accepted) or 'none'}. Unknown fields are refused so that a misspelled "
        f'one is not dropped; declare the class with extra="ignore" to drop them instead'
    )
    others = [e for e in exc.errors() if e["type"] != "extra_forbidden" or len(e["loc"]) != 1]
    if others:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or cls.__qualname__}: {e['msg']}" for e in others
        )
        message += f". Also: {details}"
    return message
