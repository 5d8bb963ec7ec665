"""drover's tables, created by drover's own migrator (one source of truth for the schema)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations, models


def apply(apps: Any, schema_editor: Any) -> None:
    from drover.contrib.django.migrations_support import apply_drover_migrations
    from drover.contrib.django.settings import alias

    if schema_editor.connection.alias == alias():
        apply_drover_migrations(schema_editor.connection.alias)


class Migration(migrations.Migration):
    # drover's migrator commits each of its migrations itself.
    atomic = False
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []

    operations: ClassVar[list[Any]] = [
        migrations.RunPython(apply, migrations.RunPython.noop, elidable=False),
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("kind", models.TextField()),
                ("queue", models.TextField()),
                ("args", models.JSONField()),
                ("state", models.TextField()),
                ("attempt", models.IntegerField()),
                ("max_attempts", models.IntegerField()),
                ("errors", models.JSONField()),
                ("scheduled_at", models.DateTimeField()),
                ("leased_until", models.DateTimeField(null=True)),
                ("created_at", models.DateTimeField()),
                ("finalized_at", models.DateTimeField(null=True)),
                ("unique_key", models.TextField(null=True)),
            ],
            options={"db_table": "drover_jobs", "managed": False, "ordering": ("-id",)},
        ),
        migrations.CreateModel(
            name="TaskResult",
            fields=[
                ("job_id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("return_value", models.JSONField(null=True)),
                ("exception_paths", models.JSONField(default=list)),
                ("started_at", models.DateTimeField(null=True)),
                ("last_attempted_at", models.DateTimeField(null=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={"db_table": "drover_django_task_results"},
        ),
    ]
