"""``Executions``: per-thread tallies of the execution metrics, summed at scrape time."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry

from drover.ops.executions import Executions


def _registry(queues: list[str]) -> tuple[CollectorRegistry, Executions]:
    registry = CollectorRegistry()
    executions = Executions(queues, (0.01, 0.1, 1))
    registry.register(executions)
    return registry, executions


def _run(executions: Executions, queue: str, ok: bool, seconds: float) -> None:
    executions.end(executions.begin(), queue, ok, seconds)


def test_configured_queues_show_zeros_before_any_execution() -> None:
    registry, _ = _registry(["mail"])
    assert registry.get_sample_value("drover_jobs_completed_total", {"queue": "mail"}) == 0
    assert registry.get_sample_value("drover_jobs_failed_total", {"queue": "mail"}) == 0
    assert registry.get_sample_value("drover_job_duration_seconds_count", {"queue": "mail"}) == 0
    assert registry.get_sample_value("drover_jobs_executing") == 0


def test_tallies_of_every_thread_are_summed_and_outlive_their_threads() -> None:
    registry, executions = _registry([])

    def work() -> None:
        for _ in range(100):
            _run(executions, "q", True, 0.005)
        _run(executions, "q", False, 0.5)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert registry.get_sample_value("drover_jobs_completed_total", {"queue": "q"}) == 400
    assert registry.get_sample_value("drover_jobs_failed_total", {"queue": "q"}) == 4
    assert registry.get_sample_value("drover_job_duration_seconds_count", {"queue": "q"}) == 404
    total = registry.get_sample_value("drover_job_duration_seconds_sum", {"queue": "q"})
    assert total is not None
    assert abs(total - (400 * 0.005 + 4 * 0.5)) < 1e-9


def test_a_value_on_a_bound_falls_in_that_bucket_and_buckets_are_cumulative() -> None:
    registry, executions = _registry([])
    for seconds in (0.01, 0.05, 1.0, 7.0):
        _run(executions, "q", True, seconds)

    def bucket(le: str) -> float | None:
        return registry.get_sample_value(
            "drover_job_duration_seconds_bucket", {"queue": "q", "le": le}
        )

    assert bucket("0.01") == 1
    assert bucket("0.1") == 2
    assert bucket("1.0") == 3
    assert bucket("+Inf") == 4


def test_executing_counts_the_executions_between_begin_and_end() -> None:
    registry, executions = _registry(["q"])
    first = executions.begin()
    second = executions.begin()
    assert registry.get_sample_value("drover_jobs_executing") == 2
    executions.end(first, "q", True, 0.001)
    assert registry.get_sample_value("drover_jobs_executing") == 1
    executions.end(second, "q", False, 0.001)
    assert registry.get_sample_value("drover_jobs_executing") == 0


def test_registering_twice_in_one_registry_is_refused() -> None:
    registry, _ = _registry(["q"])
    with pytest.raises(ValueError, match="drover_jobs_completed"):
        registry.register(Executions(["q"], (1,)))
