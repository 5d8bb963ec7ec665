"""``drover doctor``: name what hurts the queue, with evidence and a remedy (ADR 0035)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

import drover
from drover.cli.common import database_error, emit, get_globals, schema_of, url_of, usage
from drover.health import HealthFinding, HealthReport, HealthThresholds

__all__ = ["doctor_command", "finding_dict", "report_dict"]


def finding_dict(finding: HealthFinding) -> dict[str, Any]:
    """A finding as stable snake_case keys."""
    return {
        "code": finding.code,
        "severity": finding.severity.value,
        "summary": finding.summary,
        "evidence": finding.evidence,
        "remedy": finding.remedy,
    }


def report_dict(report: HealthReport) -> dict[str, Any]:
    """A report as ``{"healthy": bool, "findings": [...]}``."""
    return {"healthy": report.healthy, "findings": [finding_dict(f) for f in report.findings]}


def doctor_command(
    ctx: typer.Context,
    xmin_age: Annotated[
        float, typer.Option(help="Seconds a transaction may hold back vacuum before it is named.")
    ] = 300.0,
    lease_grace: Annotated[
        float, typer.Option(help="Seconds past an expired lease before a running job is named.")
    ] = 60.0,
    unserved_grace: Annotated[
        float, typer.Option(help="Seconds a claimable job may wait on a queue with no worker.")
    ] = 60.0,
    dead_tuples_min: Annotated[
        int, typer.Option(help="Dead tuples a drover table may carry before it is named.")
    ] = 10_000,
    dead_tuples_ratio: Annotated[
        float, typer.Option(help="Fraction of dead rows a drover table may carry (0 to 1).")
    ] = 0.2,
    claim_p99: Annotated[
        float,
        typer.Option(
            help="Seconds a live client's claim p99 (or slowest walk) may take before it is "
            "named, with the likely cause."
        ),
    ] = 0.25,
) -> None:
    """Name what hurts the queue: xmin holders, dead tuples, slow claims, unrescued leases,
    idle queues.

    One line per finding (CODE  summary — remedy). Exits 0 when healthy and 1
    with findings. Read-only; works on a schema behind this drover (and says so).
    """
    g = get_globals(ctx)
    url = url_of(g)
    try:
        thresholds = HealthThresholds(
            xmin_age=xmin_age,
            lease_grace=lease_grace,
            unserved_grace=unserved_grace,
            dead_tuples_min=dead_tuples_min,
            dead_tuples_ratio=dead_tuples_ratio,
            claim_p99=claim_p99,
        )
    except drover.ConfigError as exc:
        usage(str(exc).replace("HealthThresholds.", "--").replace("_", "-"))
    inspector = drover.Inspector(url, schema=schema_of(g))
    try:
        report = inspector.health(thresholds)
    except drover.DatabaseError as exc:
        database_error(url, exc)
    finally:
        inspector.close()
    human = "\n".join(f.line() for f in report.findings) if report.findings else "healthy"
    emit(g, human, report_dict(report))
    if not report.healthy:
        raise typer.Exit(1)
