"""The logging the long-running commands set up, and `drover.log.JsonFormatter` (no database)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import sys
from collections.abc import Iterator

import pytest
from jobdb import sample_row

import drover
from drover.cli.logs import (
    LoggingChoice,
    app_configured_logging,
    configure_logging,
    parse_log_format,
    parse_log_level,
)
from drover.log import JsonFormatter, job_scope


@contextlib.contextmanager
def clean_logging() -> Iterator[None]:
    """No handler on the root or `drover` loggers inside the block; everything restored after.

    A context manager, not a fixture: pytest adds its own capturing handlers to
    the root logger only once the test body runs.
    """
    root, ours = logging.getLogger(), logging.getLogger("drover")
    saved = (root.handlers[:], root.level, ours.handlers[:], ours.level)
    root.handlers = []
    ours.handlers = [logging.NullHandler()]
    try:
        yield
    finally:
        root.handlers, root.level = saved[0], saved[1]
        ours.handlers, ours.level = saved[2], saved[3]


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("drover", logging.WARNING, __file__, 1, "job %d: %s", (7, "x"), None)
    record.__dict__.update(extra)
    return record


@pytest.mark.parametrize(("text", "level"), [("debug", "DEBUG"), (" Warning ", "WARNING")])
def test_levels_are_case_insensitive(text: str, level: str) -> None:
    assert parse_log_level(text) == level
    assert parse_log_level(None) is None


@pytest.mark.parametrize("text", ["verbose", "", "CRITICAL", "10"])
def test_a_bad_level_names_the_choices(text: str) -> None:
    with pytest.raises(ValueError, match="--log-level must be one of DEBUG, INFO, WARNING, ERROR"):
        parse_log_level(text)


def test_formats() -> None:
    assert parse_log_format("JSON") == "json"
    assert parse_log_format(None) is None
    with pytest.raises(ValueError, match="--log-format must be one of text, json, not 'yaml'"):
        parse_log_format("yaml")


def test_json_has_the_base_keys_then_the_extra_keys() -> None:
    line = JsonFormatter().format(
        _record(event="job_failed", job_id=7, gone=None, obj=object(), level="not this")
    )
    assert "\n" not in line
    document = json.loads(line)
    assert list(document)[:5] == ["time", "level", "logger", "message", "pid"]
    assert document["level"] == "WARNING" and document["logger"] == "drover"
    assert document["message"] == "job 7: x"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", document["time"])
    assert (document["event"], document["job_id"]) == ("job_failed", 7)
    assert "gone" not in document  # None is left out
    assert document["obj"].startswith("<object object")  # not JSON: its str()


def test_json_carries_the_traceback_on_one_line() -> None:
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        record = logging.getLogger("t").makeRecord(
            "t", logging.ERROR, __file__, 1, "failed", (), exc_info=sys.exc_info()
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert json.loads(line)["exc_info"].endswith("RuntimeError: boom\nsecond line")


def test_without_an_application_configuration_one_root_handler_is_installed() -> None:
    with clean_logging():
        _one_root_handler()


def _one_root_handler() -> None:
    stream = io.StringIO()
    assert not app_configured_logging()
    assert configure_logging(LoggingChoice("WARNING", "json"), stream)
    assert app_configured_logging()  # a second call would leave it alone
    log = logging.getLogger("drover.test")
    log.info("hidden")
    row = sample_row(id=42)
    with job_scope(row):
        log.warning("inside a job, with postgresql://u:s3cret@h/db")
    (line,) = stream.getvalue().splitlines()
    document = json.loads(line)
    assert document["job_id"] == 42 and document["job_kind"] == row.kind
    assert "s3cret" not in line and "postgresql://u:***@h/db" in line


def test_text_lines_name_time_level_logger_and_process() -> None:
    stream = io.StringIO()
    with clean_logging():
        assert configure_logging(LoggingChoice(None, None), stream)
        logging.getLogger("drover").info("started")
        logging.getLogger("drover").debug("hidden at INFO, the default")
    (line,) = stream.getvalue().splitlines()
    assert line.split(" ", 2)[2].startswith("INFO drover[")
    assert line.endswith("] started")


def test_an_applications_handler_wins_and_an_explicit_level_applies_to_drover() -> None:
    stream = io.StringIO()
    app = logging.StreamHandler(stream)
    with clean_logging():
        logging.getLogger().addHandler(app)
        assert app_configured_logging()
        assert not configure_logging(LoggingChoice("DEBUG", "json"))
        assert logging.getLogger().handlers == [app]
        assert logging.getLogger("drover").level == logging.DEBUG
    assert stream.getvalue() == (
        "--log-format json is ignored: the application configures logging itself\n"
    )


def test_a_handler_on_the_drover_logger_counts_and_a_null_handler_does_not() -> None:
    with clean_logging():
        assert not app_configured_logging()  # drover's own NullHandler
        logging.getLogger("drover").addHandler(logging.StreamHandler(io.StringIO()))
        assert app_configured_logging()
    assert drover.__version__


def test_a_record_a_handler_below_the_root_wrote_is_not_written_again() -> None:
    # Django's default logging puts a console handler on the "django" logger only:
    # `manage.py drover worker` then installs the root handler, and django.tasks'
    # records, propagating, were printed twice.
    stream, console = io.StringIO(), io.StringIO()
    own = logging.StreamHandler(console)
    django = logging.getLogger("drover_test_django")
    try:
        django.addHandler(own)
        with clean_logging():
            assert configure_logging(LoggingChoice(None, None), stream)
            logging.getLogger("drover_test_django.tasks").info("Task t enqueued")
            logging.getLogger("drover").info("a drover record")
            own.setLevel(logging.ERROR)  # below its handler's level: the root writes it
            logging.getLogger("drover_test_django.tasks").warning("not the console's")
    finally:
        django.removeHandler(own)
    assert console.getvalue() == "Task t enqueued\n"
    lines = stream.getvalue().splitlines()
    assert [line.rsplit("] ", 1)[1] for line in lines] == ["a drover record", "not the console's"]
