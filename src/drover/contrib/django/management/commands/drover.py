"""``manage.py drover ...``: the drover CLI on the Django database, and the worker."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

import drover
from drover.cli import main as drover_main
from drover.contrib.django.settings import conninfo
from drover.contrib.django.worker import build_client


class Command(BaseCommand):
    """``manage.py drover worker [--concurrency N]`` runs the workers; anything else is the CLI.

    ``manage.py drover migrate|stats|jobs list|retry ID|web ...`` run the
    ``drover`` command with ``--database`` pointed at ``DROVER["DATABASE"]``.
    ``worker`` builds a client from ``settings.DROVER`` (its ``WORKERS``
    registry plus Django tasks) and runs it until SIGINT or SIGTERM.
    """

    help = "drover on this project's database: worker, migrate, stats, jobs, retry, cancel, web"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("arguments", nargs=argparse.REMAINDER, help="a drover command")

    def handle(self, *args: Any, **options: Any) -> None:
        arguments: list[str] = list(options["arguments"])
        if not arguments:
            raise CommandError("give a drover command: worker, migrate, stats, jobs, web, ...")
        if arguments[0] == "worker":
            self._worker(arguments[1:])
            return
        try:
            drover_main(["--database", conninfo(), *arguments])
        except SystemExit as exit_:
            if exit_.code not in (0, None):
                raise CommandError(
                    f"drover {arguments[0]} failed", returncode=int(exit_.code or 1)
                ) from None

    def _worker(self, rest: list[str]) -> None:
        parser = argparse.ArgumentParser(prog="manage.py drover worker")
        parser.add_argument("--concurrency", type=int)
        parser.add_argument("--shutdown-timeout", type=float)
        options = parser.parse_args(rest)
        overrides: dict[str, Any] = {}
        if options.concurrency is not None:
            overrides["concurrency"] = options.concurrency
        if options.shutdown_timeout is not None:
            overrides["shutdown_timeout"] = options.shutdown_timeout
        client = build_client(**overrides)
        try:
            client.run()
        except drover.DrainIncomplete as exc:
            raise CommandError(str(exc), returncode=1) from None
        except drover.DroverError as exc:
            raise CommandError(str(exc), returncode=1) from None
        self.stderr.write("drover worker stopped cleanly")
