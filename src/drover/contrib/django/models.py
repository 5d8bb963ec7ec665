"""Models: a read-only view of ``drover_jobs`` for the admin, and Django task results."""

from __future__ import annotations

from django.db import models


class Job(models.Model):
    """One row of ``drover_jobs``. Unmanaged and read-only: drover owns the table."""

    id = models.BigIntegerField(primary_key=True)
    kind = models.TextField()
    queue = models.TextField()
    args = models.JSONField()
    state = models.TextField()
    attempt = models.IntegerField()
    max_attempts = models.IntegerField()
    errors = models.JSONField()
    scheduled_at = models.DateTimeField()
    leased_until = models.DateTimeField(null=True)
    created_at = models.DateTimeField()
    finalized_at = models.DateTimeField(null=True)
    unique_key = models.TextField(null=True)

    class Meta:
        db_table = "drover_jobs"
        managed = False
        ordering = ("-id",)

    def __str__(self) -> str:
        return f"job {self.id} ({self.kind}, {self.state})"


class TaskResult(models.Model):
    """What a Django task run by drover returned, what it raised, and who ran each attempt.

    One row per task that started, written by the worker (``drover.contrib.django.
    runner``). ``errors`` holds one ``{"attempt", "exception_class_path", "traceback"}``
    per exception the task raised, the traceback exactly as ``traceback.format_exception``
    made it; ``worker_ids`` the lease holder of each attempt, in order.
    ``exception_paths`` (the class paths alone) is still written for an older drover
    reading the row. The row goes with its job: a foreign key to ``drover_jobs`` with
    ``ON DELETE CASCADE`` (migration 0002), so retention prunes both at once.
    """

    job_id = models.BigIntegerField(primary_key=True)
    return_value = models.JSONField(null=True)
    exception_paths = models.JSONField(default=list)
    errors = models.JSONField(default=list)
    worker_ids = models.JSONField(default=list)
    started_at = models.DateTimeField(null=True)
    last_attempted_at = models.DateTimeField(null=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "drover_django_task_results"

    def __str__(self) -> str:
        return f"result of job {self.job_id}"
