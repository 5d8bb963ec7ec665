"""The deployment examples' commands run, probed and stopped as their service managers would.

`examples/deploy/` cannot be run under systemd, Docker or Kubernetes here, so
each test runs the command the file gives, with what the file arranges around
it: the unit's working directory, the image's `WORKDIR` layout and `ENV`, the
container's `args` after the image's `ENTRYPOINT`. It asks the endpoints the
probes and the `HEALTHCHECK` ask, runs a job, sends SIGTERM once, and expects
exit status 0 within the kill timeout the file sets. The only changes: the
program is this interpreter's `python -m drover`, and the ops address is a free
loopback port instead of the file's.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_files import (
    DEPLOY,
    DOCKERFILE,
    K8S_MIGRATE,
    K8S_WORKER,
    MIGRATE_UNIT,
    WORKER_UNIT,
    container_command,
    dockerfile,
    exec_form,
    image_command,
    only,
    only_container,
    option_value,
    pod_spec,
    port_of,
    unit_command,
    unit_value,
)
from jobdb import Poll

import drover


class SendWelcome(drover.JobArgs, kind="send_welcome", queue="email"):
    """The example application's kind, as its web side would insert it."""

    user_id: int
    email: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def _environment(db_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DROVER_DATABASE_URL")}
    env.update(extra or {})
    env["DATABASE_URL"] = db_url  # what the unit's EnvironmentFile or the Secret provides
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # leave no __pycache__ in examples/deploy
    return env


def _on_loopback(words: list[str], port: int) -> list[str]:
    address = option_value(words, "--ops-addr")
    return [f"127.0.0.1:{port}" if w == address else w for w in words]


class Worker:
    """`python -m drover <words>` from `cwd`, stopped with one SIGTERM."""

    def __init__(self, words: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.port = _free_port()
        self.words = _on_loopback(words, self.port)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "drover", *self.words],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def get(self, path: str) -> tuple[int, str]:
        return _get(self.port, path)

    def ready(self, poll: Poll) -> str:
        def answer() -> str | None:
            assert self.proc.poll() is None, self.output()
            status, body = self.get("/readyz")
            return body if status == 200 else None

        body: str = poll(answer, 60, message="/readyz answers 200")
        return body

    def stop(self, kill_timeout: float) -> tuple[int, str]:
        """One SIGTERM; the exit status and stderr, within `kill_timeout` seconds."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            _, stderr = self.proc.communicate(timeout=kill_timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"still running {kill_timeout}s after SIGTERM:\n{self.output()}")
        return self.proc.returncode, stderr

    def output(self) -> str:
        if self.proc.poll() is None:
            return "(running)"
        stdout, stderr = self.proc.communicate()
        return stdout + stderr

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Every worker a test starts is killed at teardown if it still runs."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.close()


def _runs_the_examples_job(db_url: str, poll: Poll) -> None:
    """A job of the example's kind, inserted as its web side would, completes."""
    producer = drover.Client(db_url)
    try:
        row = producer.insert(SendWelcome(user_id=1, email="ada@example.com"))
        poll(
            lambda: producer.get_job(row.id).state is drover.JobState.COMPLETED,
            30,
            message="the example's worker runs its job",
        )
    finally:
        producer.close()


@pytest.mark.slow
def test_the_systemd_units_migrate_then_run_and_drain_within_timeoutstopsec(
    empty_db_url: str, workers: list[Worker], poll: Poll
) -> None:
    env = _environment(empty_db_url)
    cwd = DEPLOY  # WorkingDirectory=/srv/myapp holds the application, as here
    assert Path(unit_value(WORKER_UNIT, "Service", "WorkingDirectory")).name == "myapp"
    migrate = subprocess.run(
        [sys.executable, "-m", "drover", *unit_command(MIGRATE_UNIT)[1:]],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    worker = Worker(unit_command(WORKER_UNIT)[1:], cwd, env)
    workers.append(worker)
    assert worker.ready(poll).startswith("ok: ")  # the supervisor: every process is ready
    assert worker.get("/healthz") == (200, "ok\n")
    _runs_the_examples_job(empty_db_url, poll)
    status, stderr = worker.stop(float(unit_value(WORKER_UNIT, "Service", "TimeoutStopSec")))
    assert status == 0, stderr
    assert "drover worker stopped cleanly" in stderr


def _image_layout(root: Path) -> tuple[Path, dict[str, str]]:
    """The image's WORKDIR with what its COPY steps put there, and its ENV."""
    steps = dockerfile()
    workdir = root / only(steps, "WORKDIR").text.lstrip("/")
    workdir.mkdir(parents=True)
    for step in steps:
        if step.keyword == "COPY":
            *sources, destination = step.text.split()
            for source in sources:
                origin = DEPLOY / source
                target = workdir / destination
                if origin.is_dir():
                    shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(origin, target if destination != "." else workdir)
    env: dict[str, str] = {}
    for step in steps:
        if step.keyword == "ENV":
            env.update(re.findall(r"(\w+)=(\S+)", step.text))
    return workdir, env


def _docker_stop_time() -> float:
    found = re.search(r"docker stop --time (\d+)", DOCKERFILE.read_text())
    assert found, "the Dockerfile says how long `docker stop` must wait"
    return float(found[1])


def test_the_image_migrates_then_runs_and_passes_its_healthcheck(
    empty_db_url: str, workers: list[Worker], poll: Poll, tmp_path: Path
) -> None:
    workdir, image_env = _image_layout(tmp_path)
    env = _environment(empty_db_url, image_env)
    entrypoint = exec_form(only(dockerfile(), "ENTRYPOINT").text)
    assert entrypoint == ["drover"]
    # `docker run ... myapp migrate`
    migrate = subprocess.run(
        [sys.executable, "-m", "drover", "migrate"],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    worker = Worker(image_command()[1:], workdir, env)
    workers.append(worker)
    assert worker.ready(poll) == "ok\n"
    healthcheck = exec_form(only(dockerfile(), "HEALTHCHECK").text.partition("CMD ")[2])
    assert healthcheck[0] == "python"
    original = port_of(option_value(image_command(), "--ops-addr"))
    here = [w.replace(f":{original}/", f":{worker.port}/") for w in healthcheck[1:]]
    probe = [sys.executable, *here]
    assert subprocess.run(probe, env=env, timeout=30, check=False).returncode == 0
    _runs_the_examples_job(empty_db_url, poll)
    status, stderr = worker.stop(_docker_stop_time())
    assert status == 0, stderr


def test_the_kubernetes_worker_refuses_an_unmigrated_database_until_the_job_ran(
    empty_db_url: str, workers: list[Worker], poll: Poll, tmp_path: Path
) -> None:
    workdir, image_env = _image_layout(tmp_path)
    env = _environment(empty_db_url, image_env)
    args = container_command(only_container(K8S_WORKER, "Deployment"))[1:]
    # Started before the migration Job: exit 1, naming the command to run.
    early = Worker(args, workdir, env)
    workers.append(early)
    early.proc.wait(60)
    assert early.proc.returncode == 1
    assert "drover migrate" in early.output()
    migration = container_command(only_container(K8S_MIGRATE, "Job"))[1:]
    job = subprocess.run(
        [sys.executable, "-m", "drover", *migration],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert job.returncode == 0, job.stdout + job.stderr
    worker = Worker(args, workdir, env)
    workers.append(worker)
    container = only_container(K8S_WORKER, "Deployment")
    assert worker.ready(poll) == "ok\n"
    assert worker.get(container["readinessProbe"]["httpGet"]["path"]) == (200, "ok\n")
    assert worker.get(container["livenessProbe"]["httpGet"]["path"]) == (200, "ok\n")
    _runs_the_examples_job(empty_db_url, poll)
    grace = float(pod_spec(K8S_WORKER, "Deployment")["terminationGracePeriodSeconds"])
    status, stderr = worker.stop(grace)
    assert status == 0, stderr
    assert "drover worker stopped cleanly" in stderr
