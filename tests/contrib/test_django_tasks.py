"""DroverTaskBackend against the behaviours Django's own task backends are tested for (Django 6+).

Runs in the example project (examples/django_app, ``shop.tasks``), each case
in its own interpreter. Skipped where Django has no ``django.tasks``; the nox
session ``django6`` (run by .ci/run) runs it on Django 6.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from test_django import PROJECT, _count, _env, django_script, manage

import drover

Poll = Callable[..., Any]

django = pytest.importorskip("django")
if django.VERSION < (6, 0):
    pytest.skip("django.tasks needs Django 6.0 or newer", allow_module_level=True)


@pytest.fixture
def project_db(empty_db_url: str) -> str:
    migrated = manage(empty_db_url, "migrate", "--verbosity", "0")
    assert migrated.returncode == 0, migrated.stderr
    return empty_db_url


def test_enqueue_stores_a_ready_job_in_the_callers_transaction(project_db: str) -> None:
    report = django_script(
        project_db,
        """
        from django.db import transaction
        from django.tasks import TaskResultStatus, default_task_backend
        from shop.tasks import shout
        from drover.contrib.django.models import Job

        class Boom(Exception):
            pass

        result = shout.enqueue("hello", punctuation="!")
        try:
            with transaction.atomic():
                shout.enqueue("rolled back")
                raise Boom
        except Boom:
            pass
        jobs = list(Job.objects.all())
        print(json.dumps({
            "status": result.status, "args": result.args, "kwargs": result.kwargs,
            "is_finished": result.is_finished, "enqueued": result.enqueued_at is not None,
            "backend": result.backend, "id": result.id, "job_ids": [str(j.id) for j in jobs],
            "queues": [j.queue for j in jobs], "kinds": [j.kind for j in jobs],
            "attempts": result.attempts, "supports": [default_task_backend.supports_defer,
            default_task_backend.supports_get_result, default_task_backend.supports_priority],
        }))
        """,
    )
    assert report["status"] == "READY" and not report["is_finished"]
    assert report["args"] == ["hello"] and report["kwargs"] == {"punctuation": "!"}
    assert report["job_ids"] == [report["id"]]  # the rolled-back enqueue left nothing
    assert report["queues"] == ["mail"] and report["kinds"] == ["django_task"]
    assert report["attempts"] == 0 and report["backend"] == "default"
    assert report["supports"] == [True, True, True]


def test_what_drover_cannot_honour_is_djangos_invalid_task(project_db: str) -> None:
    report = django_script(
        project_db,
        """
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.utils import timezone
        from django.tasks import default_task_backend
        from shop.tasks import shout
        from datetime import datetime

        errors = {}
        for name, make in {
            "priority": lambda: shout.using(priority=101),
            "queue": lambda: shout.using(queue_name="nowhere"),
            "naive": lambda: shout.using(run_after=datetime(2030, 1, 1)),
        }.items():
            try:
                make()
            except InvalidTask as exc:
                errors[name] = str(exc)
        for bad in ("nope", "999999"):
            try:
                default_task_backend.get_result(bad)
            except TaskResultDoesNotExist:
                errors["missing-" + bad] = "TaskResultDoesNotExist"
        later = shout.using(run_after=timezone.now() + timezone.timedelta(hours=1)).enqueue("x")
        from drover.contrib.django.models import Job
        errors["deferred_state"] = Job.objects.get(id=int(later.id)).state
        print(json.dumps(errors))
        """,
    )
    assert report["priority"] == "priority must be a whole number between -100 and 100."
    assert report["queue"] == "Queue 'nowhere' is not valid for backend."
    assert report["naive"] == "run_after must be an aware datetime."
    assert report["missing-nope"] == report["missing-999999"] == "TaskResultDoesNotExist"
    assert report["deferred_state"] == "scheduled"


def test_task_priority_is_the_jobs_priority_one_to_one(project_db: str) -> None:
    report = django_script(
        project_db,
        """
        from django.tasks import default_task_backend
        from django.tasks.base import DEFAULT_TASK_PRIORITY, TASK_MAX_PRIORITY, TASK_MIN_PRIORITY
        from shop.tasks import shout
        from drover._db.rows import row_from_db
        import drover

        ids = {
            "default": shout.enqueue("plain").id,
            "top": shout.using(priority=TASK_MAX_PRIORITY).enqueue("top").id,
            "bottom": shout.using(priority=TASK_MIN_PRIORITY).enqueue("bottom").id,
            "ten": shout.using(priority=10).enqueue("ten").id,
        }
        with drover.Inspector(os.environ["DATABASE_URL"]) as inspector:
            stored = {name: inspector.get_job(int(i)).priority for name, i in ids.items()}
        print(json.dumps({
            "stored": stored,
            "range": [TASK_MIN_PRIORITY, TASK_MAX_PRIORITY, DEFAULT_TASK_PRIORITY],
            "supports": default_task_backend.supports_priority,
        }))
        """,
    )
    assert report["range"] == [drover.job.MIN_PRIORITY, drover.job.MAX_PRIORITY, 0]
    assert report["stored"] == {"default": 0, "top": 100, "bottom": -100, "ten": 10}
    assert report["supports"] is True


def test_the_worker_runs_tasks_and_get_result_reports_them(project_db: str, poll: Poll) -> None:
    ids = django_script(
        project_db,
        """
        from shop.tasks import shout, which_attempt, explode
        print(json.dumps([shout.enqueue("hello").id, which_attempt.enqueue().id,
                          explode.enqueue().id]))
        """,
    )
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "drover", "worker"],
        cwd=PROJECT,
        env=_env(project_db),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        poll(
            lambda: (
                _count(
                    project_db,
                    "SELECT count(*) FROM drover_jobs WHERE state IN ('completed', 'dead')",
                )
                == 3
            ),
            timeout=60,
            message="the three tasks finished",
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    report = django_script(
        project_db,
        f"""
        from django.tasks import default_task_backend
        from shop.tasks import shout
        ok = shout.get_result({ids[0]!r})
        ctx = default_task_backend.get_result({ids[1]!r})
        bad = default_task_backend.get_result({ids[2]!r})
        stale = shout.get_result({ids[0]!r})
        try:
            bad.return_value
        except ValueError as exc:
            failed_value = str(exc)
        print(json.dumps({{
            "ok": [ok.status, ok.return_value, ok.attempts, ok.is_finished],
            "ok_times": ok.finished_at >= ok.started_at >= ok.enqueued_at,
            "ctx": [ctx.status, ctx.return_value],
            "bad": [bad.status, bad.errors[0].exception_class.__name__,
                    bad.errors[0].traceback.rstrip().endswith("ValueError: exploded on purpose"),
                    failed_value, bad.attempts],
        }}))
        """,
    )
    assert report["ok"] == ["SUCCESSFUL", "HELLO", 1, True] and report["ok_times"]
    assert report["ctx"] == ["SUCCESSFUL", 1]
    assert report["bad"] == ["FAILED", "ValueError", True, "Task failed", 1]
