"""DroverTaskBackend against the behaviours Django's own task backends are tested for (Django 6+).

Runs in the example project (examples/django_app, ``shop.tasks``), each case
in its own interpreter. Skipped where Django has no ``django.tasks``; the nox
session ``django6`` (run by .ci/run) runs it on Django 6.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from jobdb import idle_workers
from test_django import _PRELUDE, PROJECT, _count, _env, django_script, manage

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


# --- what .using() set, per-attempt workers, exact tracebacks, retention (issue 40) -------------

# The default backend is Django's dummy, drover's is "drover": a task sent there
# with .using(backend="drover") must come back naming it, and refresh() must ask it.
_TWO_BACKENDS = """
TASKS = {
    "default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend", "QUEUES": []},
    "drover": {
        "BACKEND": "drover.contrib.django.DroverTaskBackend",
        "QUEUES": ["default", "mail", "bulk"],
        "OPTIONS": {"max_attempts": 1},
    },
}
DROVER = {**DROVER, "CONFIG": {**DROVER["CONFIG"], "queues": {"default": 1, "mail": 1, "bulk": 1}}}
"""


@pytest.fixture
def two_backends(tmp_path: Path, empty_db_url: str) -> dict[str, str]:
    """The environment of a migrated project whose settings are the example's plus
    ``_TWO_BACKENDS``."""
    (tmp_path / "settings_two.py").write_text(
        f"from project.settings import *  # noqa\n{_TWO_BACKENDS}\n"
    )
    env = _env(empty_db_url)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    env["DJANGO_SETTINGS_MODULE"] = "settings_two"
    migrated = _run(env, "manage.py", "migrate", "--verbosity", "0")
    assert migrated.returncode == 0, migrated.stderr
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _script(env: dict[str, str], body: str) -> Any:
    """Run ``body`` under ``env``'s settings; it prints its report as JSON last."""
    done = _run(env, "-c", _PRELUDE + textwrap.dedent(body))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _work_until(env: dict[str, str], poll: Poll, sql: str, message: str) -> int:
    """Run ``manage.py drover worker`` until ``sql`` counts 1 or more; stop it; its pid."""
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "drover", "worker"],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        poll(lambda: _count(env["DATABASE_URL"], sql) >= 1, timeout=60, message=message)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    return worker.pid


def test_what_using_set_comes_back_from_enqueue_get_result_and_refresh(
    two_backends: dict[str, str],
) -> None:
    """priority, queue_name, run_after and backend set with .using() are on ``result.task``
    from ``enqueue()`` and ``get_result()``, and ``refresh()`` asks the backend the task
    went to (here not the default). It used to be that ``result.task`` was the module-level
    task: backend "default", priority 0, no run_after, and refresh() asked the dummy."""
    report = _script(
        two_backends,
        """
        from datetime import timedelta
        from django.tasks import default_task_backend, task_backends
        from django.tasks.exceptions import InvalidTask
        from django.utils import timezone
        from shop.tasks import shout

        later = (timezone.now() + timedelta(hours=1)).replace(microsecond=123456)
        chosen = shout.using(priority=7, queue_name="bulk", run_after=later, backend="drover")
        enqueued = chosen.enqueue("hi")
        got = task_backends["drover"].get_result(enqueued.id)
        plain = shout.using(backend="drover").enqueue("plain")
        plain_got = shout.using(backend="drover").get_result(plain.id)

        def facts(t):
            return [t.priority, t.queue_name, t.run_after and t.run_after.isoformat(), t.backend]

        enqueued.refresh()  # asks "drover": the dummy default has never seen this id
        try:
            task_backends["drover"].enqueue(shout.using(queue_name="elsewhere"), ["x"], {})
            invalid = None
        except InvalidTask as exc:
            invalid = str(exc)
        print(json.dumps({
            "later": later.isoformat(),
            "enqueued": facts(enqueued.task), "got": facts(got.task),
            "equal": [enqueued.task == chosen, got.task == chosen],
            "plain": facts(plain.task), "plain_got": facts(plain_got.task),
            "refreshed": [enqueued.status, enqueued.backend, got.backend],
            "dummy_results": len(default_task_backend.results), "invalid": invalid,
        }))
        """,
    )
    expected = [7, "bulk", report["later"], "drover"]
    assert report["enqueued"] == report["got"] == expected
    assert report["equal"] == [True, True]
    assert report["plain"] == report["plain_got"] == [0, "mail", None, "drover"]
    assert report["refreshed"] == ["READY", "drover", "drover"]
    assert report["dummy_results"] == 0
    # Django's own InvalidTask, from its validate_task, as its own backends raise it.
    assert report["invalid"] == "Queue 'elsewhere' is not valid for backend."


def test_worker_ids_name_each_attempts_worker_and_tracebacks_are_kept_exactly(
    two_backends: dict[str, str], poll: Poll
) -> None:
    """Two worker processes run one failing task (an operator retries it in between):
    ``worker_ids`` names each, in order, and each error keeps the traceback exactly as
    ``traceback.format_exception`` made it, final newline included. ``worker_ids`` used
    to name the last holder twice, and the tracebacks lost their newline."""
    env = two_backends
    failing, fine = _script(
        env,
        """
        from shop.tasks import explode, shout
        print(json.dumps([explode.using(backend="drover").enqueue().id,
                          shout.using(backend="drover").enqueue("x").id]))
        """,
    )
    first = _work_until(
        env,
        poll,
        "SELECT (count(*) = 2)::int FROM drover_jobs WHERE state IN ('completed', 'dead')",
        "both tasks finished on the first worker",
    )
    retried = _run(env, "manage.py", "drover", "retry", failing)
    assert retried.returncode == 0, retried.stderr
    second = _work_until(
        env,
        poll,
        f"SELECT count(*) FROM drover_jobs WHERE id = {int(failing)} AND state = 'dead' "
        "AND jsonb_array_length(errors) = 2",
        "the retried task failed again on the second worker",
    )
    assert first != second
    report = _script(
        env,
        f"""
        from django.tasks import task_backends
        backend = task_backends["drover"]
        bad, ok = backend.get_result({failing!r}), backend.get_result({fine!r})
        print(json.dumps({{
            "bad": [bad.status, bad.attempts, bad.worker_ids],
            "ok": [ok.status, ok.attempts, ok.worker_ids],
            "errors": [[e.exception_class_path, e.traceback] for e in bad.errors],
        }}))
        """,
    )
    status, attempts, worker_ids = report["bad"]
    assert [status, attempts, len(worker_ids)] == ["FAILED", 2, 2]
    assert f"(pid {first} on " in worker_ids[0] and f"(pid {second} on " in worker_ids[1]
    status, attempts, worker_ids = report["ok"]
    assert [status, attempts, len(worker_ids)] == ["SUCCESSFUL", 1, 1]
    assert f"(pid {first} on " in worker_ids[0]
    assert len(report["errors"]) == 2
    for path, trace in report["errors"]:
        assert path == "builtins.ValueError"
        assert trace.startswith("Traceback (most recent call last):\n")
        assert trace.endswith("ValueError: exploded on purpose\n")


def test_the_pruner_deletes_a_tasks_result_row_with_its_job(
    two_backends: dict[str, str], poll: Poll
) -> None:
    """Retention: drover's pruner deleting a finished task's job deletes its row in
    ``drover_django_task_results`` too. Those rows used to stay forever."""
    env = two_backends
    url = env["DATABASE_URL"]
    _script(
        env,
        """
        from shop.tasks import explode, shout
        print(json.dumps([explode.using(backend="drover").enqueue().id,
                          shout.using(backend="drover").enqueue("x").id]))
        """,
    )
    _work_until(
        env,
        poll,
        "SELECT (count(*) = 2)::int FROM drover_jobs WHERE state IN ('completed', 'dead')",
        "both tasks finished",
    )
    assert _count(url, "SELECT count(*) FROM drover_django_task_results") == 2
    everything = drover.Retention(completed=0, cancelled=0, dead=0)
    config = drover.Config(
        workers=idle_workers(),
        plugins=[drover.plugins.Pruner(retention=everything, interval=0.05)],
    )
    client = drover.Client(url, config)
    client.start()
    try:
        poll(
            lambda: _count(url, "SELECT count(*) FROM drover_jobs") == 0,
            timeout=30,
            message="the pruner deleted both jobs",
        )
    finally:
        client.stop(5)
        client.close()
    assert _count(url, "SELECT count(*) FROM drover_django_task_results") == 0


# A TASKS backend whose queue no worker works: "emails" where DROVER works "email".
_UNWORKED = """
TASKS = {
    "default": {
        "BACKEND": "drover.contrib.django.DroverTaskBackend",
        "QUEUES": ["default", "emails", "reports"],
    },
}
DROVER = {**DROVER, "CONFIG": {**DROVER["CONFIG"], "queues": {"default": 1, "email": 1}}}
"""


def test_a_task_queue_no_worker_works_is_a_check_warning_and_the_worker_says_so(
    tmp_path: Path,
) -> None:
    """``manage.py check`` warns (drover.W001) for each queue a drover TASKS backend
    accepts and ``DROVER["CONFIG"]["queues"]`` does not work, with "did you mean" for a
    near miss; the worker names them when it starts. It used to say nothing, and the
    tasks waited forever."""
    (tmp_path / "settings_unworked.py").write_text(
        f"from project.settings import *  # noqa\n{_UNWORKED}\n"
    )
    env = _env("host=/nonexistent dbname=unused")  # the check opens no connection
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    env["DJANGO_SETTINGS_MODULE"] = "settings_unworked"
    checked = _run(env, "manage.py", "check")
    assert checked.returncode == 0, checked.stderr  # a warning, not an error
    assert checked.stderr.count("(drover.W001)") == 2, checked.stderr
    assert "settings.TASKS['default']: (drover.W001)" in checked.stderr
    assert "queue 'emails'" in checked.stderr and "did you mean 'email'?" in checked.stderr
    assert "queue 'reports'" in checked.stderr
    # The worker logs them as it starts (before, here, it fails to connect), checks or not.
    worker = _run(env, "manage.py", "drover", "--skip-checks", "worker")
    assert "System check" not in worker.stderr, worker.stderr
    assert "did you mean 'email'? (drover.W001)" in worker.stderr, worker.stderr
    assert "sent to 'reports' waits forever (drover.W001)" in worker.stderr


def test_the_upgrade_drops_orphaned_results_and_reads_older_rows(project_db: str) -> None:
    """Migration 0002 on a database an older drover wrote: a result whose job retention
    already deleted goes, one whose job is still there reads as it did (the class paths by
    position, the last holder once per attempt), and from then on deleting the job
    deletes its result."""
    back = manage(project_db, "migrate", "drover", "0001", "--verbosity", "0")
    assert back.returncode == 0, back.stderr
    job_id = django_script(
        project_db, "from shop.tasks import explode\nprint(json.dumps(explode.enqueue().id))"
    )
    failures = [
        {"attempt": 1, "at": "2026-12-01T00:00:00Z", "error": "ValueError: a", "trace": "t1"},
        {"attempt": 2, "at": "2026-12-01T00:01:00Z", "error": "KeyError: b", "trace": "t2"},
    ]
    with psycopg.connect(project_db, autocommit=True) as conn:
        conn.execute(
            "UPDATE drover_jobs SET state = 'dead', attempt = 2, errors = %s::jsonb, "
            "finalized_at = now(), leased_by = 'old (pid 1 on h)' WHERE id = %s",
            [json.dumps(failures), int(job_id)],
        )
        conn.execute(
            "INSERT INTO drover_django_task_results (job_id, return_value, exception_paths, "
            "started_at, last_attempted_at, updated_at) VALUES "
            '(%s, NULL, \'["builtins.ValueError", "builtins.KeyError"]\', now(), now(), now()),'
            " (%s, NULL, '[]', now(), now(), now())",
            [int(job_id), int(job_id) + 1000],
        )
    forward = manage(project_db, "migrate", "--verbosity", "0")
    assert forward.returncode == 0, forward.stderr
    assert _count(project_db, "SELECT count(*) FROM drover_django_task_results") == 1
    report = django_script(
        project_db,
        f"""
        from django.tasks import default_task_backend
        old = default_task_backend.get_result({job_id!r})
        print(json.dumps({{
            "status": old.status, "workers": old.worker_ids,
            "errors": [[e.exception_class_path, e.traceback] for e in old.errors],
        }}))
        """,
    )
    assert report == {
        "status": "FAILED",
        "workers": ["old (pid 1 on h)", "old (pid 1 on h)"],
        "errors": [["builtins.ValueError", "t1"], ["builtins.KeyError", "t2"]],
    }
    with psycopg.connect(project_db, autocommit=True) as conn:
        conn.execute("DELETE FROM drover_jobs WHERE id = %s", [int(job_id)])
    assert _count(project_db, "SELECT count(*) FROM drover_django_task_results") == 0
