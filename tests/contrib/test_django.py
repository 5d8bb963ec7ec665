"""drover.contrib.django in the example project (examples/django_app), on a real database.

Django's settings are process-wide, so everything Django runs in its own
interpreter: ``manage.py`` commands, and scripts that set the example's
settings up and report back as JSON.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[tuple[Any, ...]]
Poll = Callable[..., Any]
PROJECT = Path(__file__).resolve().parents[2] / "examples" / "django_app"

_PRELUDE = """
import json, os, sys
sys.path.insert(0, os.getcwd())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
import django
django.setup()
"""


def _env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["DATABASE_URL"] = url
    return env


def manage(url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT,
        env=_env(url),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def django_script(url: str, body: str) -> Any:
    """Run ``body`` in the example project; it must ``print(json.dumps(...))`` last."""
    result = subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(body)],
        cwd=PROJECT,
        env=_env(url),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def project_db(empty_db_url: str) -> str:
    migrated = manage(empty_db_url, "migrate", "--verbosity", "0")
    assert migrated.returncode == 0, migrated.stderr
    return empty_db_url


def _count(url: str, sql: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def test_manage_migrate_applies_drovers_schema_through_its_own_migrator(project_db: str) -> None:
    shown = manage(project_db, "showmigrations", "drover")
    assert "[X] 0001_drover_schema" in shown.stdout
    status = manage(project_db, "drover", "migrate", "--status", "--json")
    assert status.returncode == 0, status.stderr
    document = json.loads(status.stdout)
    assert document["pending"] == [] and document["current_version"] >= 5
    # Running migrate again (a newer drover's migrations) is a no-op here.
    assert manage(project_db, "migrate", "--verbosity", "0").returncode == 0


def test_insert_joins_atomic_savepoints_and_autocommit(project_db: str) -> None:
    report = django_script(
        project_db,
        """
        from django.db import transaction
        from drover.contrib.django import insert, insert_many
        from shop.jobs import SendReceipt
        from drover.contrib.django.models import Job

        class Boom(Exception):
            pass

        seen = {}
        with transaction.atomic():
            kept = insert(SendReceipt(order_id=1))
            try:
                with transaction.atomic():  # a savepoint
                    insert(SendReceipt(order_id=2))
                    raise Boom
            except Boom:
                pass
            seen["inside"] = sorted(j.args["order_id"] for j in Job.objects.all())
        try:
            with transaction.atomic():
                insert(SendReceipt(order_id=3))
                raise Boom
        except Boom:
            pass
        insert(SendReceipt(order_id=4))  # autocommit: committed at once
        insert_many([SendReceipt(order_id=5), SendReceipt(order_id=6)])
        seen["after"] = sorted(j.args["order_id"] for j in Job.objects.all())
        seen["queue"] = kept.queue
        print(json.dumps(seen))
        """,
    )
    assert report == {"inside": [1], "after": [1, 4, 5, 6], "queue": "mail"}


def test_insert_goes_through_the_insert_middleware_of_drover_config(project_db: str) -> None:
    """``DROVER["CONFIG"]["middleware"]``'s insert middleware see the helpers' inserts
    (ADR 0047), and ``depends_on`` is honoured."""
    report = django_script(
        project_db,
        """
        import contextlib
        from django.conf import settings
        from django.db import transaction
        from django.test import override_settings
        import drover
        from drover.contrib.django import insert, insert_many
        from shop.jobs import SendReceipt

        class Recorder:
            def __init__(self):
                self.seen = []

            @contextlib.contextmanager
            def around_insert(self, batch):
                batch.add_tags("django")
                yield
                self.seen.append([batch.operation, [r.id for r in batch.rows]])

        recorder = Recorder()
        config = {**settings.DROVER.get("CONFIG", {}), "middleware": [recorder]}
        with override_settings(DROVER={**settings.DROVER, "CONFIG": config}):
            with transaction.atomic():
                first = insert(SendReceipt(order_id=1))
                waiting = insert(SendReceipt(order_id=2), drover.InsertOpts(depends_on=[first]))
            batch = insert_many([SendReceipt(order_id=3)])
        plain = insert(SendReceipt(order_id=4))
        print(json.dumps({
            "seen": recorder.seen,
            "ids": [first.id, waiting.id, batch[0].id],
            "tags": [list(r.tags) for r in (first, waiting, batch[0], plain)],
            "waiting": waiting.state.value,
        }))
        """,
    )
    first, waiting, batched = report["ids"]
    assert report["seen"] == [
        ["insert_tx", [first]],
        ["insert_tx", [waiting]],
        ["insert_many_tx", [batched]],
    ]
    assert report["tags"] == [["django"], ["django"], ["django"], []]
    assert report["waiting"] == "pending"
    with psycopg.connect(project_db) as conn:
        edges = conn.execute("SELECT job_id, depends_on FROM drover_job_deps").fetchall()
    assert edges == [(waiting, first)]


def test_a_request_commits_its_order_and_job_together_or_neither(project_db: str) -> None:
    report = django_script(
        project_db,
        """
        from django.test import Client
        client = Client(raise_request_exception=False)
        ok = client.post("/orders", {"email": "ada@example.com"})
        failed = client.post("/orders", {"email": "bob@example.com", "fail": "1"})
        print(json.dumps({"ok": ok.status_code, "failed": failed.status_code, "body": ok.json()}))
        """,
    )
    assert report["ok"] == 200 and report["failed"] == 500
    assert _count(project_db, "SELECT count(*) FROM shop_order") == 1
    assert _count(project_db, "SELECT count(*) FROM drover_jobs") == 1
    assert _count(project_db, "SELECT id FROM drover_jobs") == report["body"]["job"]


def test_manage_drover_worker_runs_the_jobs_and_stops_on_sigterm(
    project_db: str, poll: Poll
) -> None:
    django_script(
        project_db,
        """
        from django.test import Client
        Client().post("/orders", {"email": "ada@example.com"})
        print(json.dumps(True))
        """,
    )
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "drover", "worker", "--concurrency", "2"],
        cwd=PROJECT,
        env=_env(project_db),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        poll(
            lambda: (
                _count(project_db, "SELECT count(*) FROM drover_jobs WHERE state = 'completed'")
                == 1
            ),
            timeout=30,
            message="the receipt job completed by manage.py drover worker",
        )
        assert (
            _count(project_db, "SELECT count(*) FROM shop_order WHERE email LIKE '%(receipt sent)'")
            == 1
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert "drover worker stopped cleanly" in err


def test_manage_drover_passes_other_commands_to_the_cli(project_db: str) -> None:
    django_script(
        project_db,
        """
        from drover.contrib.django import insert
        from shop.jobs import SendReceipt
        insert(SendReceipt(order_id=9))
        print(json.dumps(True))
        """,
    )
    listed = manage(project_db, "drover", "jobs", "list", "--state", "available", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [j["kind"] for j in json.loads(listed.stdout)] == ["send_receipt"]
    refused = manage(project_db, "drover", "retry", "999999")
    assert refused.returncode == 1
    assert "does not exist" in refused.stderr
    assert manage(project_db, "drover").returncode != 0


def test_the_admin_lists_jobs_read_only_and_retries_through_the_inspector(
    project_db: str,
) -> None:
    report = django_script(
        project_db,
        """
        from django.contrib.auth.models import User
        from django.test import Client
        from drover.contrib.django import insert
        from drover.contrib.django.models import Job
        from shop.jobs import SendReceipt
        import psycopg
        from django.db import connection

        job = insert(SendReceipt(order_id=1))
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE drover_jobs SET state = 'dead', finalized_at = now() WHERE id = %s",
                [job.id],
            )
        admin = User.objects.create_superuser("root", "root@example.com", "pw")
        client = Client()
        client.force_login(admin)
        listing = client.get("/admin/drover/job/")
        detail = client.get(f"/admin/drover/job/{job.id}/change/")
        add = client.get("/admin/drover/job/add/")
        done = client.post(
            "/admin/drover/job/", {"action": "retry_jobs", "_selected_action": [job.id]}
        )
        running = insert(SendReceipt(order_id=2))
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE drover_jobs SET state = 'running', attempt = 1, "
                "leased_until = now() + interval '1 hour' WHERE id = %s",
                [running.id],
            )
        asked = client.post(
            "/admin/drover/job/",
            {"action": "cancel_jobs", "_selected_action": [running.id]},
            follow=True,
        )
        with connection.cursor() as cur:
            cur.execute("SELECT cancel_request IS NOT NULL FROM drover_jobs WHERE id = %s",
                        [running.id])
            requested = cur.fetchone()[0]
        print(json.dumps({
            "listing": listing.status_code, "has_job": f"job {job.id}" in listing.content.decode()
                or str(job.id) in listing.content.decode(),
            "detail": detail.status_code, "add": add.status_code, "done": done.status_code,
            "state": Job.objects.get(id=job.id).state,
            "asked": "their workers were asked to cancel them" in asked.content.decode(),
            "running": Job.objects.get(id=running.id).state, "requested": requested,
        }))
        """,
    )
    assert report["listing"] == 200 and report["has_job"]
    assert report["detail"] == 200  # viewable, not editable
    assert report["add"] == 403
    assert report["done"] == 302 and report["state"] == "available"
    assert report["asked"] and report["requested"] and report["running"] == "running"


def test_the_migrations_match_the_models_on_this_django(project_db: str) -> None:
    # A project that installs drover must not be told its models have changes:
    # makemigrations --check fails CI pipelines, and migrate nags on every run.
    checked = manage(project_db, "makemigrations", "--check", "--dry-run")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "No changes detected" in checked.stdout
    migrated = manage(project_db, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "have changes that are not yet reflected" not in migrated.stdout + migrated.stderr


def test_a_missing_schema_names_manage_py_migrate(empty_db_url: str) -> None:
    # Never migrated: the worker refuses to start, and an insert fails, each
    # naming Django's command rather than drover's own.
    worker = manage(empty_db_url, "drover", "worker", timeout=60)
    assert worker.returncode == 1, worker.stderr
    assert "drover's schema is missing from" in worker.stderr
    assert "run `python manage.py migrate`" in worker.stderr
    assert "drover migrate" not in worker.stderr and "Traceback" not in worker.stderr
    for command in (["stats"], ["jobs", "list"]):  # drover's CLI, run through manage.py
        passed = manage(empty_db_url, "drover", *command, timeout=60)
        assert passed.returncode == 1, passed.stderr
        assert "run `python manage.py migrate` first" in passed.stderr
        assert "drover migrate" not in passed.stderr
        assert "CommandError" not in passed.stderr  # drover's one line, not a second
    report = django_script(
        empty_db_url,
        """
        import drover
        from drover.contrib.django import insert, insert_many
        from shop.jobs import SendReceipt

        seen = {}
        for name, call in (
            ("insert", lambda: insert(SendReceipt(order_id=1))),
            ("insert_many", lambda: insert_many([SendReceipt(order_id=2)])),
        ):
            try:
                call()
            except drover.SchemaMissing as exc:
                seen[name] = {
                    "message": str(exc), "remedy": exc.remedy,
                    "cause": type(exc.__cause__).__name__,
                }
        print(json.dumps(seen))
        """,
    )
    assert set(report) == {"insert", "insert_many"}
    for seen in report.values():
        assert "run `python manage.py migrate`" in seen["message"]
        assert "drover migrate" not in seen["message"]
        assert seen["remedy"].startswith("run `python manage.py migrate`")
        assert seen["cause"] == "UndefinedTable"  # psycopg's error stays chained


# Settings modules built on the example's, each with one kind of mistake in DROVER.
_BROKEN_SETTINGS = {
    "not_a_dict": ('DROVER = ["shop.jobs.workers"]', "drover.E001", "must be a dict, not list"),
    "unknown_key": (
        'DROVER = {"DATABASE": "default", "QUEUES": {"mail": 1}}',
        "drover.E002",
        "unknown key(s) 'QUEUES'",
    ),
    "no_such_alias": (
        'DROVER = {"DATABASE": "jobs"}',
        "drover.E003",
        "'jobs', which is not in DATABASES (aliases: default)",
    ),
    "not_postgresql": (
        'DATABASES["lite"] = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}\n'
        'DROVER = {"DATABASE": "lite"}',
        "drover.E004",
        "needs a PostgreSQL database; 'lite' is django.db.backends.sqlite3",
    ),
    "workers_do_not_import": (
        'DROVER = {"WORKERS": "shop.jobz.workers"}',
        "drover.E005",
        "'shop.jobz.workers' cannot be imported: ModuleNotFoundError",
    ),
    "workers_missing_attribute": (
        'DROVER = {"WORKERS": "shop.jobs.registry"}',
        "drover.E005",
        "has no attribute 'registry'",
    ),
    "workers_not_a_path": ('DROVER = {"WORKERS": 3}', "drover.E005", "must be a dotted path"),
    "workers_not_a_registry": (
        'DROVER = {"WORKERS": "shop.jobs.SendReceipt"}',
        "drover.E006",
        "names the class shop.jobs.SendReceipt, not a drover.Workers",
    ),
    "config_unknown_field": (
        'DROVER = {"WORKERS": "shop.jobs.workers", "CONFIG": {"concurency": 4}}',
        "drover.E007",
        "unknown Config field(s): concurency",
    ),
    "config_out_of_range": (
        'DROVER = {"CONFIG": {"concurrency": 0}}',
        "drover.E007",
        "concurrency",
    ),
}


def _settings_module(tmp_path: Path, name: str, body: str) -> dict[str, str]:
    """Write ``settings_<name>`` (the example's settings plus ``body``); its environment.

    ``DATABASE_URL`` names no server: the checks must not open a connection.
    """
    module = f"settings_{name}"
    (tmp_path / f"{module}.py").write_text(f"from project.settings import *  # noqa\n{body}\n")
    env = _env("host=/nonexistent dbname=unused")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    env["DJANGO_SETTINGS_MODULE"] = module
    return env


def _manage_with(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("case", sorted(_BROKEN_SETTINGS))
def test_manage_py_check_names_a_wrong_drover_setting(tmp_path: Path, case: str) -> None:
    body, check_id, text = _BROKEN_SETTINGS[case]
    checked = _manage_with(_settings_module(tmp_path, case, body), "check")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "Traceback" not in checked.stderr
    assert f"settings.DROVER: ({check_id})" in checked.stderr
    assert text in checked.stderr
    assert "HINT:" in checked.stderr
    # One mistake, one message: a wrong key does not drag the others down with it.
    assert checked.stderr.count("(drover.E") == 1, checked.stderr


def test_manage_py_check_lists_every_drover_problem_at_once(tmp_path: Path) -> None:
    body = (
        'DROVER = {"DATABASE": "jobs", "WORKERS": "shop.jobs.SendReceipt", '
        '"CONFIG": {"concurrency": -1}, "QUEUES": {}}'
    )
    checked = _manage_with(_settings_module(tmp_path, "many", body), "check", "--tag", "drover")
    assert checked.returncode == 1, checked.stderr
    found = sorted(set(re.findall(r"\(drover\.(E\d{3})\)", checked.stderr)))
    assert found == ["E002", "E003", "E006", "E007"], checked.stderr


def test_the_example_projects_drover_setting_passes_the_checks(tmp_path: Path) -> None:
    checked = _manage_with(_settings_module(tmp_path, "as_is", ""), "check")
    assert checked.returncode == 0, checked.stderr
    assert "System check identified no issues" in checked.stdout


def test_the_worker_reports_a_wrong_setting_as_a_check_not_a_traceback(tmp_path: Path) -> None:
    env = _settings_module(tmp_path, "worker", 'DROVER = {"WORKERS": "shop.jobz.workers"}')
    worker = _manage_with(env, "drover", "worker")
    assert worker.returncode == 1, worker.stderr
    assert "(drover.E005)" in worker.stderr and "Traceback" not in worker.stderr


def test_djangos_common_options_work_after_the_drover_command(tmp_path: Path) -> None:
    # `--settings` after `drover worker` is honoured (this module names a broken
    # WORKERS, the default settings a good one) and never reaches drover's parser.
    env = _settings_module(tmp_path, "given", 'DROVER = {"WORKERS": "shop.jobz.workers"}')
    del env["DJANGO_SETTINGS_MODULE"]
    worker = _manage_with(env, "drover", "worker", "--settings", "settings_given", "--traceback")
    assert worker.returncode == 1, worker.stderr
    assert "(drover.E005)" in worker.stderr and "unrecognized" not in worker.stderr
    # Passed through to the drover CLI: the database named by DATABASE_URL is
    # unreachable (exit 1), which shows the options were not a usage error (2).
    env = _settings_module(tmp_path, "fine", "")
    del env["DJANGO_SETTINGS_MODULE"]
    stats = _manage_with(env, "drover", "stats", "--settings=settings_fine", "--no-color")
    assert stats.returncode == 1, stats.stderr
    assert "No such option" not in stats.stderr and "cannot use the database" in stats.stderr


def test_a_schema_in_drover_config_is_used_by_migrate_inserts_and_manage_drover(
    tmp_path: Path, empty_db_url: str
) -> None:
    """``DROVER["CONFIG"]["schema"]``: Django's migrate, ``insert`` and ``manage.py drover``
    all work on that schema's installation (ADR 0043); public gets no drover table."""
    body = (
        'DROVER = {"DATABASE": "default", "WORKERS": "shop.jobs.workers", '
        '"CONFIG": {"schema": "shop_jobs"}}'
    )
    env = _settings_module(tmp_path, "schema", body)
    env["DATABASE_URL"] = empty_db_url
    migrated = _manage_with(env, "migrate", "--verbosity", "0")
    assert migrated.returncode == 0, migrated.stderr
    script = textwrap.dedent(
        """
        from drover.contrib.django import insert
        from shop.jobs import SendReceipt
        print(json.dumps(insert(SendReceipt(order_id=7)).id))
        """
    )
    inserted = subprocess.run(
        [
            sys.executable,
            "-c",
            _PRELUDE.replace('"project.settings"', "'settings_schema'") + script,
        ],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert inserted.returncode == 0, inserted.stderr
    stats = _manage_with(env, "drover", "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    assert sum(d["count"] for d in json.loads(stats.stdout)["depths"]) == 1
    assert _count(empty_db_url, "SELECT count(*) FROM shop_jobs.drover_jobs") == 1
    assert (
        _count(
            empty_db_url,
            "SELECT count(*) FROM pg_tables WHERE tablename = 'drover_jobs' "
            "AND schemaname = 'public'",
        )
        == 0
    )
