"""Config.pgbouncer and Config.session_url: checked when the Config is built (ADR 0040)."""

from __future__ import annotations

import pytest

import drover


def test_defaults_detect_and_use_no_session_url() -> None:
    config = drover.Config()
    assert config.pgbouncer is None
    assert config.session_url is None


@pytest.mark.parametrize("value", [True, False, None])
def test_pgbouncer_takes_true_false_or_none(value: bool | None) -> None:
    assert drover.Config(pgbouncer=value).pgbouncer is value


@pytest.mark.parametrize("value", [1, "yes", "true", 0.0])
def test_pgbouncer_refuses_anything_else(value: object) -> None:
    with pytest.raises(drover.ConfigError, match=r"Config\.pgbouncer must be True, False or None"):
        drover.Config(pgbouncer=value)  # type: ignore[arg-type]


def test_session_url_is_kept_and_never_shown() -> None:
    url = "postgresql://app:s3cret@db.internal:5432/app"
    config = drover.Config(pgbouncer=True, session_url=url)
    assert config.session_url == url
    assert "s3cret" not in repr(config)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", r"Config\.session_url is empty"),
        ("   ", r"Config\.session_url is empty"),
        (42, r"Config\.session_url must be a conninfo string or URL, not int"),
        ("postgresql+psycopg://u:s3cret@h/db", r"SQLAlchemy driver"),
        ("host=h password=s3cret bogus_option=1", r"cannot be parsed"),
    ],
)
def test_a_bad_session_url_is_refused_without_its_password(value: object, message: str) -> None:
    with pytest.raises(drover.ConfigError, match=message) as caught:
        drover.Config(session_url=value)  # type: ignore[arg-type]
    assert "s3cret" not in str(caught.value)


def test_session_url_with_pgbouncer_false_is_a_contradiction() -> None:
    with pytest.raises(
        drover.ConfigError, match=r"session_url is set but Config\.pgbouncer is False"
    ):
        drover.Config(pgbouncer=False, session_url="postgresql://h/db")


def test_replace_checks_the_pair_again() -> None:
    config = drover.Config(session_url="postgresql://h/db")
    with pytest.raises(drover.ConfigError, match="contradiction|drop one of them"):
        config.replace(pgbouncer=False)
