"""The Django admin's view of drover's jobs: read-only, retry and cancel via the Inspector."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

import drover
from drover.contrib.django.models import Job
from drover.contrib.django.settings import conninfo, schema


def _apply(
    modeladmin: admin.ModelAdmin[Job], request: HttpRequest, queryset: QuerySet[Job], verb: str
) -> None:
    done, asked, refused = 0, 0, []
    with drover.Inspector(conninfo(), schema=schema()) as inspector:
        for job_id in queryset.values_list("id", flat=True):
            try:
                if verb == "retry":
                    inspector.retry_job(job_id)
                elif inspector.cancel_job(job_id).state is drover.JobState.RUNNING:
                    asked += 1  # its worker is told; it ends cancelled with its attempt
                    continue
                done += 1
            except (drover.InvalidTransition, drover.NotFound, drover.DuplicateJob) as exc:
                refused.append(f"{job_id}: {exc}")
    past = "retried" if verb == "retry" else "cancelled"
    if done:
        modeladmin.message_user(request, f"{done} job(s) {past}.", messages.SUCCESS)
    if asked:
        modeladmin.message_user(
            request,
            f"{asked} running job(s): their workers were asked to cancel them.",
            messages.SUCCESS,
        )
    if refused:
        modeladmin.message_user(
            request, f"{len(refused)} refused: {'; '.join(refused[:10])}", messages.WARNING
        )


@admin.action(description="Retry the selected dead or cancelled jobs")
def retry_jobs(
    modeladmin: admin.ModelAdmin[Job], request: HttpRequest, queryset: QuerySet[Job]
) -> None:
    _apply(modeladmin, request, queryset, "retry")


@admin.action(description="Cancel the selected waiting, running or dead jobs")
def cancel_jobs(
    modeladmin: admin.ModelAdmin[Job], request: HttpRequest, queryset: QuerySet[Job]
) -> None:
    _apply(modeladmin, request, queryset, "cancel")


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """drover_jobs, newest first; nothing is edited here, only retried or cancelled."""

    list_display = ("id", "kind", "queue", "state", "attempt", "max_attempts", "scheduled_at")
    list_filter = ("state", "queue")
    search_fields = ("kind", "unique_key")
    actions = (retry_jobs, cancel_jobs)
    readonly_fields = tuple(f.name for f in Job._meta.get_fields())

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Viewing needs "view"; actions run through the Inspector, not the ORM.
        return False
