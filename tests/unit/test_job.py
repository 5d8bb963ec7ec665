"""JobArgs class rules and InsertOpts validation (pure Python, no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pydantic
import pytest
from jobdb import sample_row

import drover


def test_kind_and_defaults_come_from_class_keywords() -> None:
    class SendEmail(drover.JobArgs, kind="send_email", queue="email", max_attempts=5):
        to: str

    assert SendEmail.kind == "send_email"
    assert SendEmail.default_queue == "email"
    assert SendEmail.default_max_attempts == 5
    # kind is a ClassVar: not a field, not in the JSON.
    assert "kind" not in SendEmail.model_fields
    assert SendEmail(to="a").model_dump_json() == '{"to":"a"}'


def test_args_are_frozen() -> None:
    class Frozen(drover.JobArgs, kind="frozen"):
        x: int

    args = Frozen(x=1)
    with pytest.raises(pydantic.ValidationError):
        args.x = 2  # type: ignore[misc]


def test_job_rows_are_immutable_named_tuples() -> None:
    row = sample_row(id=7, args={"a": 1})
    with pytest.raises(AttributeError):
        row.state = drover.JobState.RUNNING  # type: ignore[misc]
    assert row.state is drover.JobState.AVAILABLE
    moved = row._replace(state=drover.JobState.RUNNING, attempt=1)
    assert (moved.state, moved.attempt, moved.id) == (drover.JobState.RUNNING, 1, 7)
    assert row == sample_row(
        id=7, args={"a": 1}, scheduled_at=row.scheduled_at, created_at=row.created_at
    )
    assert row._asdict()["args"] == {"a": 1}
    assert drover.JobRow.__module__ == "drover"
    assert repr(row).startswith("JobRow(id=7, kind='k', queue='default'")


@pytest.mark.parametrize("kwargs", [{}, {"kind": ""}, {"kind": "   "}])
def test_missing_or_empty_kind_fails_at_class_definition(kwargs: dict[str, str]) -> None:
    with pytest.raises(TypeError, match="kind"):

        class NoKind(drover.JobArgs, **kwargs):
            pass


def test_non_string_kind_fails_at_class_definition() -> None:
    with pytest.raises(TypeError, match="must be a str"):

        class BadKind(drover.JobArgs, kind=3):
            pass


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"queue": ""}, "queue must not be empty"), ({"max_attempts": 0}, "between 1 and")],
)
def test_bad_class_defaults_fail_at_class_definition(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(TypeError, match=match):

        class Bad(drover.JobArgs, kind="bad", **kwargs):
            pass


def test_abstract_base_then_concrete_subclass() -> None:
    class Base(drover.JobArgs, abstract=True):
        tenant: str

    class Concrete(Base, kind="concrete"):
        pass

    assert Concrete(tenant="t").kind == "concrete"
    with pytest.raises(TypeError, match="kind"):

        class StillMissing(Base):
            pass


def test_subclass_inherits_kind_and_defaults() -> None:
    class Parent(drover.JobArgs, kind="parent", queue="q"):
        pass

    class Child(Parent):
        extra: int = 0

    assert (Child.kind, Child.default_queue) == ("parent", "q")


def test_insert_opts_defaults() -> None:
    opts = drover.InsertOpts()
    assert (opts.queue, opts.scheduled_at, opts.unique_key, opts.max_attempts) == (
        None,
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("kwargs", "match", "base"),
    [
        ({"queue": ""}, "queue must not be empty", ValueError),
        ({"queue": "  "}, "queue must not be empty", ValueError),
        ({"queue": 5}, "queue must be a str", ValueError),
        ({"queue": "q" * 129}, "maximum is 128", ValueError),
        ({"queue": "a\x00b"}, "NUL", ValueError),
        ({"scheduled_at": datetime(2030, 1, 1)}, "timezone-aware", ValueError),
        ({"scheduled_at": "2030-01-01"}, "must be a datetime", ValueError),
        ({"unique_key": 7}, "unique_key must be a str", ValueError),
        ({"unique_key": "k" * 1025}, "maximum is 1024", ValueError),
        ({"unique_key": "\x00"}, "NUL", ValueError),
        ({"max_attempts": 0}, "between 1 and", ValueError),
        ({"max_attempts": True}, "must be an int", ValueError),
        ({"max_attempts": 2**31}, "between 1 and", ValueError),
    ],
)
def test_insert_opts_validation(kwargs: dict[str, object], match: str, base: type) -> None:
    with pytest.raises(drover.InvalidInsertOpts, match=match) as info:
        drover.InsertOpts(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, drover.DroverError)
    assert isinstance(info.value, base)


def test_insert_opts_accepts_aware_times() -> None:
    at = datetime.now(UTC) + timedelta(minutes=5)
    assert drover.InsertOpts(scheduled_at=at).scheduled_at == at


def test_job_state_order_matches_the_lifecycle() -> None:
    assert list(drover.JobState) == [
        drover.JobState.PENDING,
        drover.JobState.AVAILABLE,
        drover.JobState.SCHEDULED,
        drover.JobState.RUNNING,
        drover.JobState.RETRYABLE,
        drover.JobState.COMPLETED,
        drover.JobState.CANCELLED,
        drover.JobState.DEAD,
    ]
    assert drover.JobState("dead") == "dead"


class Email(drover.JobArgs, kind="unit_email"):
    to: str
    retries: int = 0
    reply_to: str | None = pydantic.Field(default=None, alias="replyTo")


def test_an_unknown_field_is_refused_naming_it_and_the_closest_field() -> None:
    with pytest.raises(drover.InvalidJobArgs) as raised:
        Email(to="a", retires=3)  # type: ignore[call-arg]
    text = str(raised.value)
    assert text.startswith("Email got an unknown field 'retires' (did you mean 'retries'?)")
    assert "its fields are to, retries, replyTo" in text
    assert 'extra="ignore"' in text
    # A drover error, and a TypeError like Python's own unexpected keyword argument.
    assert isinstance(raised.value, drover.DroverError) and isinstance(raised.value, TypeError)


def test_several_unknown_fields_and_other_errors_are_all_named() -> None:
    with pytest.raises(drover.InvalidJobArgs) as raised:
        Email(retires=3, zzz=1)  # type: ignore[call-arg]
    text = str(raised.value)
    assert "unknown fields 'retires' (did you mean 'retries'?), 'zzz';" in text
    assert text.endswith("Also: to: Field required")


def test_other_validation_errors_stay_pydantics() -> None:
    with pytest.raises(pydantic.ValidationError):
        Email(to=1)  # type: ignore[arg-type]


def test_an_alias_is_a_known_field() -> None:
    assert Email(to="a", replyTo="b").reply_to == "b"
    with pytest.raises(drover.InvalidJobArgs, match="did you mean 'replyTo'"):
        Email(to="a", reply_too="b")  # type: ignore[call-arg]


def test_decoding_ignores_keys_the_class_does_not_have() -> None:
    # A row written by an older producer: its `template` field was removed since.
    decoded = Email.model_validate({"to": "a", "retries": 2, "template": "welcome"})
    assert decoded == Email(to="a", retries=2)
    with pytest.raises(pydantic.ValidationError, match="retries"):
        Email.model_validate({"to": "a", "retries": "many", "template": "welcome"})
    # JSON given by an operator (drover enqueue) is checked like a constructor call.
    with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
        Email.model_validate_json('{"to": "a", "retires": 2}')


def test_extra_ignore_opts_out_and_extra_allow_keeps_them() -> None:
    class Lenient(drover.JobArgs, kind="unit_lenient", extra="ignore"):
        to: str

    class Open(drover.JobArgs, kind="unit_open", extra="allow"):
        to: str

    assert Lenient(to="a", retires=3).model_dump() == {"to": "a"}  # type: ignore[call-arg]
    assert Open(to="a", note=1).model_dump() == {"to": "a", "note": 1}  # type: ignore[call-arg]
    assert Lenient.model_config["frozen"] is True  # the rest of drover's config is kept
