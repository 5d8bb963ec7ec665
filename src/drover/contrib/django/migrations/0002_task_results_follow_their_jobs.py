"""Task results keep each attempt's worker and exact traceback, and go with their jobs.

``errors`` and ``worker_ids`` are new columns. The foreign key from
``drover_django_task_results.job_id`` to ``drover_jobs.id`` with ``ON DELETE
CASCADE`` makes a result row live exactly as long as its job: drover's
retention pruner (or an operator) deleting the job deletes the row in the
same statement. It is added in three short steps, each committed on its own,
so ``drover_jobs`` is locked only for the first (adding a constraint ``NOT
VALID`` is a catalog change): from then on every deletion cascades; then the
rows whose jobs were pruned earlier are deleted; then the constraint is
validated, which reads the results table without blocking drover's writes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations, models, transaction

_CONSTRAINT = "drover_django_task_results_job_id_fk"
_TABLE = "drover_django_task_results"


def _on_drovers_database(schema_editor: Any) -> bool:
    from drover.contrib.django.settings import alias

    return bool(schema_editor.connection.alias == alias())


def _exists(cursor: Any) -> bool:
    cursor.execute(
        "SELECT 1 FROM pg_constraint WHERE conname = %s AND conrelid = %s::regclass",
        [_CONSTRAINT, _TABLE],
    )
    return cursor.fetchone() is not None


def add_cascade(apps: Any, schema_editor: Any) -> None:
    if not _on_drovers_database(schema_editor):
        return  # the results table alone, without drover's jobs: nothing to follow
    from drover.contrib.django.settings import jobs_table

    connection = schema_editor.connection
    jobs = jobs_table()
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        if _exists(cursor):
            return
        cursor.execute(
            f"ALTER TABLE {_TABLE} ADD CONSTRAINT {_CONSTRAINT} FOREIGN KEY (job_id) "
            f"REFERENCES {jobs} (id) ON DELETE CASCADE NOT VALID"
        )
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {_TABLE} r WHERE NOT EXISTS "
            f"(SELECT 1 FROM {jobs} j WHERE j.id = r.job_id)"
        )
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {_TABLE} VALIDATE CONSTRAINT {_CONSTRAINT}")


def drop_cascade(apps: Any, schema_editor: Any) -> None:
    if not _on_drovers_database(schema_editor):
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {_TABLE} DROP CONSTRAINT IF EXISTS {_CONSTRAINT}")


class Migration(migrations.Migration):
    # Each step of the constraint commits on its own (see the module's docstring).
    atomic = False
    dependencies: ClassVar[list[tuple[str, str]]] = [("drover", "0001_drover_schema")]

    operations: ClassVar[list[Any]] = [
        migrations.AddField(
            model_name="taskresult", name="errors", field=models.JSONField(default=list)
        ),
        migrations.AddField(
            model_name="taskresult", name="worker_ids", field=models.JSONField(default=list)
        ),
        migrations.RunPython(add_cascade, drop_cascade, elidable=False),
    ]
