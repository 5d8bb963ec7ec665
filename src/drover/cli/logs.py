"""Logging for the long-running commands: `drover worker`, `drover web`, `manage.py drover worker`.

The library never configures logging (the `drover` logger has a `NullHandler`),
so a worker started from the command line would print nothing. These commands
therefore set logging up themselves, but only when the application has not:
once the application's module is imported (or Django is set up), a handler on
the root logger or on the `drover` logger means the application configured
logging, and its configuration wins (ADR 0021).
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from drover._db.errors import redact
from drover.cli.common import usage
from drover.log import JobLogFilter, JsonFormatter

__all__ = [
    "FORMATS",
    "LEVELS",
    "LOG_FORMAT_HELP",
    "LOG_LEVEL_HELP",
    "TEXT_FORMAT",
    "LoggingChoice",
    "app_configured_logging",
    "configure_logging",
    "logging_choice",
    "parse_log_format",
    "parse_log_level",
]

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
"""The values `--log-level` accepts, in any case."""
FORMATS = ("text", "json")
"""The values `--log-format` accepts, in any case."""
LOG_LEVEL_HELP = "DEBUG, INFO (default), WARNING or ERROR; any case."
LOG_FORMAT_HELP = "text (default) or json: one JSON object per line."
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s"
"""The text format: time, level, logger and process id, then the message."""

_DEFAULT_LEVEL = "INFO"


class LoggingChoice:
    """The parsed `--log-level` and `--log-format`, `None` for a flag not given."""

    __slots__ = ("format", "level")

    def __init__(self, level: str | None, format: str | None) -> None:
        self.level = level
        self.format = format

    def argv(self) -> list[str]:
        """The flags again, for a child process that must log the same way."""
        args: list[str] = []
        if self.level is not None:
            args += ["--log-level", self.level]
        if self.format is not None:
            args += ["--log-format", self.format]
        return args


def parse_log_level(text: str | None) -> str | None:
    """`text` as an upper-case level name, or `None`; raises `ValueError` naming the choices."""
    if text is None:
        return None
    level = text.strip().upper()
    if level not in LEVELS:
        raise ValueError(f"--log-level must be one of {', '.join(LEVELS)}, not {text!r}")
    return level


def parse_log_format(text: str | None) -> str | None:
    """`text` as `text` or `json`, or `None`; raises `ValueError` naming the choices."""
    if text is None:
        return None
    fmt = text.strip().lower()
    if fmt not in FORMATS:
        raise ValueError(f"--log-format must be one of {', '.join(FORMATS)}, not {text!r}")
    return fmt


def logging_choice(log_level: str | None, log_format: str | None) -> LoggingChoice:
    """The `--log-level` and `--log-format` flags, checked; a bad value is a usage error."""
    try:
        return LoggingChoice(parse_log_level(log_level), parse_log_format(log_format))
    except ValueError as exc:
        usage(str(exc))


def _real(handler: logging.Handler) -> bool:
    return not isinstance(handler, logging.NullHandler)


def app_configured_logging() -> bool:
    """True when the root logger or the `drover` logger has a handler that is not a `NullHandler`.

    `logging.basicConfig()`, a `dictConfig` with a root handler, or a handler
    added to `drover` all count. Django's own defaults do not: they add handlers
    only to the `django` loggers.
    """
    root = logging.getLogger()
    return any(_real(h) for h in root.handlers) or any(
        _real(h) for h in logging.getLogger("drover").handlers
    )


class _Redacting(logging.Formatter):
    """Formats with `inner`, then scrubs any connection password from the line."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self._inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return redact(self._inner.format(record))


class _NotHandledBelow(logging.Filter):
    """Drops a record that a handler of its own logger, or of an ancestor below the root,
    has already written (Django's `django` loggers print on a console of their own): the
    root handler then adds nothing, instead of printing it a second time."""

    def filter(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None and logger.parent is not None:  # the root has no parent
            if any(_real(h) and record.levelno >= h.level for h in logger.handlers):
                return False
            if not logger.propagate:
                return True
            logger = logger.parent
        return True


def configure_logging(choice: LoggingChoice, stream: TextIO | None = None) -> bool:
    """Set logging up for a long-running command unless the application did; True if it did.

    Without an application configuration: one handler on the root logger,
    writing to `stream` (standard error) in the chosen format, at the chosen
    level (INFO by default); in JSON with a `JobLogFilter`, so that records
    logged inside a job carry its fields. psycopg keeps its own loggers at
    WARNING whatever the root level, unless the application sets them.

    With one, handlers and formats are the application's: an explicit
    `--log-level` only sets the level of the `drover` logger, and an explicit
    `--log-format` is ignored with a warning on the `drover.cli` logger.
    A record some handler below the root already wrote (Django's `django`
    loggers have a console handler of their own) is not written again.
    """
    if app_configured_logging():
        if choice.level is not None:
            logging.getLogger("drover").setLevel(choice.level)
        if choice.format is not None:
            logging.getLogger("drover.cli").warning(
                "--log-format %s is ignored: the application configures logging itself",
                choice.format,
                extra={"event": "log_format_ignored"},
            )
        return False
    level = choice.level or _DEFAULT_LEVEL
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    inner = JsonFormatter() if choice.format == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(_Redacting(inner))
    if choice.format == "json":
        handler.addFilter(JobLogFilter())  # an application's records inside a job name it
    handler.addFilter(_NotHandledBelow())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    return True
