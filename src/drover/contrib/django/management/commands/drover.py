"""``manage.py drover ...``: the drover CLI on the Django database, and the worker."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.module_loading import import_string

import drover
from drover.cli import main as drover_main
from drover.cli.common import MIGRATE_COMMAND, database_of
from drover.cli.logs import LoggingChoice, configure_logging, parse_log_format, parse_log_level
from drover.cli.shutdown import serve
from drover.contrib.django.checks import drover_task_backends, unworked_task_queues
from drover.contrib.django.settings import conninfo, schema
from drover.contrib.django.task_args import TASK_KIND
from drover.contrib.django.worker import build_client, workers
from drover.queues import format_queues

_log = logging.getLogger("drover.cli")


def _runs_django_tasks() -> bool:
    """True when a backend in `settings.TASKS` is drover's (Django 6.0+), so tasks may come."""
    try:
        from drover.contrib.django.tasks import DroverTaskBackend
    except ImportError:  # Django before 6.0 has no django.tasks
        return False
    for options in (getattr(settings, "TASKS", None) or {}).values():
        try:
            backend = import_string(str(options.get("BACKEND", "")))
        except ImportError:
            continue
        if isinstance(backend, type) and issubclass(backend, DroverTaskBackend):
            return True
    return False


def _unworked_task_queues(worked: list[str]) -> list[str]:
    """What `drover.W001` says of each drover `TASKS` backend's queue this worker does not
    work: the worker logs it at start (the system checks may have been skipped)."""
    return [
        str(message.msg)
        for name, queues in drover_task_backends()
        for message in unworked_task_queues(name, queues, worked)
    ]


# Django's options for every command. Django applies --settings and --pythonpath
# before any command runs, wherever they stand; given after `drover ...` they
# reach this command's free-form arguments, so they are dropped here rather
# than handed to drover's own parser, which would call them unknown.
_DJANGO_VALUED = ("--settings", "--pythonpath", "--verbosity")
_DJANGO_FLAGS = ("--traceback", "--no-color", "--force-color", "--skip-checks")


def _without_django_options(arguments: list[str]) -> list[str]:
    kept: list[str] = []
    rest = iter(arguments)
    for argument in rest:
        if argument in _DJANGO_FLAGS or argument.startswith(tuple(f"{o}=" for o in _DJANGO_VALUED)):
            continue
        if argument in _DJANGO_VALUED:
            next(rest, None)
            continue
        kept.append(argument)
    return kept


def _schema_flag() -> list[str]:
    # DROVER["CONFIG"]["schema"], so `manage.py drover stats` sees the
    # installation the worker runs (ADR 0043).
    name = schema()
    return [] if name is None else ["--schema", name]


class Command(BaseCommand):
    """``manage.py drover worker [--concurrency N]`` runs the workers; anything else is the CLI.

    ``manage.py drover migrate|stats|jobs list|retry ID|web ...`` run the
    ``drover`` command with ``--database`` pointed at ``DROVER["DATABASE"]``.
    ``worker`` builds a client from ``settings.DROVER`` (its ``WORKERS``
    registry plus Django tasks) and runs it until SIGINT or SIGTERM. It
    refuses to start (exit 2) when ``WORKERS`` registers nothing and no
    ``TASKS`` backend is drover's: such a worker could only fail every job.
    It warns (``drover.W001``, logged and as a system check) about each queue a
    drover ``TASKS`` backend accepts that it does not work.
    It logs to standard error as `drover worker` does (`--log-level`,
    `--log-format`), unless Django's ``LOGGING`` setting puts a handler on
    the root or the `drover` logger: then that configuration wins. Django's
    own default configuration, which has handlers only on the `django`
    loggers, does not count.
    """

    help = "drover on this project's database: worker, migrate, stats, jobs, retry, cancel, web"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("arguments", nargs=argparse.REMAINDER, help="a drover command")

    def handle(self, *args: Any, **options: Any) -> None:
        arguments = _without_django_options(list(options["arguments"]))
        if not arguments:
            raise CommandError("give a drover command: worker, migrate, stats, jobs, web, ...")
        if arguments[0] == "worker":
            self._worker(arguments[1:])
            return
        try:
            token = MIGRATE_COMMAND.set("python manage.py migrate")
            try:
                drover_main(["--database", conninfo(), *_schema_flag(), *arguments])
            finally:
                MIGRATE_COMMAND.reset(token)
        except SystemExit as exit_:
            if exit_.code not in (0, None):
                # drover has printed its one-line error; a CommandError would add a
                # second ("CommandError: drover stats failed"). Keep its exit code.
                raise SystemExit(int(exit_.code or 1)) from None

    def _worker(self, rest: list[str]) -> None:
        parser = argparse.ArgumentParser(prog="manage.py drover worker")
        parser.add_argument("--concurrency", type=int)
        parser.add_argument("--shutdown-timeout", type=float)
        parser.add_argument("--log-level", help="DEBUG, INFO (default), WARNING or ERROR")
        parser.add_argument("--log-format", help="text (default) or json")
        options = parser.parse_args(rest)
        try:
            choice = LoggingChoice(
                parse_log_level(options.log_level), parse_log_format(options.log_format)
            )
        except ValueError as exc:
            raise CommandError(str(exc), returncode=2) from None
        registry = workers()
        if not set(registry.kinds()) - {TASK_KIND} and not _runs_django_tasks():
            raise CommandError(
                "this worker has nothing to run: DROVER['WORKERS'] registers no job kind and "
                "no TASKS backend is drover.contrib.django.DroverTaskBackend. Set "
                "DROVER['WORKERS'] to the dotted path of your drover.Workers (what "
                "drover.Config(workers=...) receives outside Django)",
                returncode=2,
            )
        overrides: dict[str, Any] = {}
        if options.concurrency is not None:
            overrides["concurrency"] = options.concurrency
        if options.shutdown_timeout is not None:
            overrides["shutdown_timeout"] = options.shutdown_timeout
        client = build_client(**overrides)
        configure_logging(choice)
        config = client.config
        queues = format_queues(config.queues)
        database = database_of(client)
        _log.info(
            "drover %s worker starting under Django: database %s, queues %s, concurrency %d",
            drover.__version__,
            database,
            queues,
            config.concurrency,
            extra={
                "event": "worker_starting",
                "version": drover.__version__,
                "database": database,
                "queues": queues,
                "concurrency": config.concurrency,
                "processes": 1,
            },
        )
        for said in _unworked_task_queues(list(config.queues)):
            _log.warning(
                "%s (drover.W001)", said, extra={"event": "task_queue_unworked", "problem": said}
            )
        try:
            # Not client.run(): after a hand-back the process ends, so an
            # abandoned handler thread ends with it (ADR 0053).
            serve(client, lambda verdict: self.stderr.write(f"CommandError: {verdict}"))
        except drover.DroverError as exc:
            raise CommandError(str(exc), returncode=1) from None
        self.stderr.write("drover worker stopped cleanly")
