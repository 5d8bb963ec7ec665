"""Worker registration: class form, function form, duplicates, bad declarations."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypeVar

import pytest

import drover

A = TypeVar("A", bound=drover.JobArgs)


class SendEmail(drover.JobArgs, kind="send_email"):
    to: str


class Resize(drover.JobArgs, kind="resize"):
    image_id: int


class SendEmailWorker(drover.Worker[SendEmail]):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def work(self, job: drover.Job[SendEmail]) -> None:
        self.seen.append(job.args.to)


def _job(args: A) -> drover.Job[A]:
    return drover.Job(
        id=1,
        kind=args.kind,
        queue="default",
        attempt=1,
        max_attempts=25,
        created_at=datetime.now(UTC),
        args=args,
    )


def test_class_worker_registers_under_its_args_kind() -> None:
    workers = drover.Workers()
    worker = workers.add(SendEmailWorker())
    assert SendEmailWorker.args_type is SendEmail
    assert "send_email" in workers
    found = workers.get("send_email")
    assert found is not None
    args_type, registered = found
    assert args_type is SendEmail and registered is worker
    registered.work(_job(SendEmail(to="a")))
    assert worker.seen == ["a"]


def test_function_worker_from_annotation() -> None:
    workers = drover.Workers()
    calls: list[int] = []

    @workers.register
    def resize(job: drover.Job[Resize]) -> None:
        calls.append(job.args.image_id)

    found = workers.get("resize")
    assert found is not None
    assert found[0] is Resize
    found[1].work(_job(Resize(image_id=9)))
    assert calls == [9]
    resize(_job(Resize(image_id=3)))  # still a plain function
    assert calls == [9, 3]


def test_function_worker_with_explicit_args() -> None:
    workers = drover.Workers()

    @workers.register(args=Resize)
    def resize(job):  # type: ignore[no-untyped-def]
        return None

    assert workers.kinds() == ["resize"]


def test_duplicate_kind_raises_at_registration() -> None:
    workers = drover.Workers()
    workers.add(SendEmailWorker())
    with pytest.raises(drover.ConfigError, match='already registered for kind "send_email"'):
        workers.add(SendEmailWorker())

    with pytest.raises(drover.ConfigError, match="send_email"):

        @workers.register
        def also_send(job: drover.Job[SendEmail]) -> None:
            pass

    assert len(workers) == 1


def test_function_without_a_job_annotation_is_refused() -> None:
    workers = drover.Workers()
    with pytest.raises(drover.ConfigError, match=r"drover.Job\[YourArgs\]"):

        @workers.register  # type: ignore[arg-type]
        def untyped(job: int) -> None:
            pass

    with pytest.raises(drover.ConfigError, match="exactly one annotated parameter"):

        @workers.register  # type: ignore[arg-type]
        def nothing() -> None:
            pass


def test_worker_generic_parameter_must_be_job_args() -> None:
    with pytest.raises(TypeError, match="needs a drover.JobArgs subclass"):

        class Bad(drover.Worker[int]):  # type: ignore[type-var]
            def work(self, job: drover.Job[int]) -> None:  # type: ignore[type-var]
                pass


def test_add_refuses_non_workers_and_unbound_workers() -> None:
    workers = drover.Workers()
    with pytest.raises(drover.ConfigError, match="needs a drover.Worker instance"):
        workers.add(object())  # type: ignore[type-var]

    class Generic(drover.Worker[drover.JobArgs]):
        def work(self, job: drover.Job[drover.JobArgs]) -> None:
            pass

    # Worker[JobArgs] binds the abstract base, whose kind is undefined.
    with pytest.raises(drover.ConfigError, match="has no job kind"):
        workers.add(Generic())


def test_register_args_must_be_job_args() -> None:
    workers = drover.Workers()
    with pytest.raises(drover.ConfigError, match="args= must be a drover.JobArgs subclass"):
        workers.register(args=int)  # type: ignore[type-var]
