"""The deployment examples agree with drover and with the guide that shows them.

`tests/cli/test_deploy_examples.py` runs their commands against a database;
these checks read the files: the kill timeouts cover the drain budget, the
probes ask the real endpoints on the port the worker binds, the image and the
manifests run the documented commands, and the guide quotes the files as
they are.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_files import (
    DEPLOY,
    DOCKERFILE,
    GUIDE,
    K8S_MIGRATE,
    K8S_WORKER,
    MIGRATE_UNIT,
    SUPERVISOR_KILL_MARGIN,
    WORKER_UNIT,
    container_command,
    dockerfile,
    exec_form,
    image_command,
    one_kind,
    only,
    only_container,
    option_value,
    pod_spec,
    port_of,
    unit_command,
    unit_settings,
    unit_value,
)

# The guide's rule: the kill timeout is the drain budget plus about 15 s (the
# supervisor's 10 s kill margin and 5 s for the rest).
KILL_SLACK = 15.0
APP = "myapp.jobs:make_client"


def _defines_function(spec: str) -> bool:
    module, _, attribute = spec.partition(":")
    source = DEPLOY / (module.replace(".", "/") + ".py")
    tree = ast.parse(source.read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == attribute for n in tree.body)


def test_the_worker_apps_spec_names_a_function_of_the_example() -> None:
    assert _defines_function(APP)
    for words in (unit_command(WORKER_UNIT), image_command()):
        assert words[1:3] == ["worker", APP], words
    assert container_command(only_container(K8S_WORKER, "Deployment"))[1:3] == ["worker", APP]


def test_the_worker_unit_drains_on_sigterm_within_its_stop_timeout() -> None:
    words = unit_command(WORKER_UNIT)
    assert Path(words[0]).name == "drover"
    assert unit_value(WORKER_UNIT, "Service", "Type") == "exec"
    assert unit_value(WORKER_UNIT, "Service", "KillSignal") == "SIGTERM"
    assert unit_value(WORKER_UNIT, "Service", "KillMode") == "mixed"
    budget = float(option_value(words, "--shutdown-timeout"))
    stop = float(unit_value(WORKER_UNIT, "Service", "TimeoutStopSec"))
    assert stop >= budget + KILL_SLACK
    assert stop > budget + SUPERVISOR_KILL_MARGIN  # the supervisor kills first, and says so
    # The ops port has no authentication: loopback on a host.
    assert option_value(words, "--ops-addr").startswith("127.0.0.1:")


def test_the_units_take_the_database_url_from_a_file_never_the_command_line() -> None:
    for unit in (WORKER_UNIT, MIGRATE_UNIT):
        service = unit_settings(unit)["Service"]
        assert service["EnvironmentFile"] == ["/etc/myapp/drover.env"], unit.name
        assert "Environment" not in service, unit.name
        assert not any("postgres" in w for w in unit_command(unit)), unit.name


def test_the_migrate_unit_runs_drover_migrate_as_the_worker_would() -> None:
    words = unit_command(MIGRATE_UNIT)
    assert Path(words[0]).name == "drover"
    assert words[1:] == ["migrate"]
    assert unit_value(MIGRATE_UNIT, "Service", "Type") == "oneshot"
    assert Path(words[0]).parent == Path(unit_command(WORKER_UNIT)[0]).parent
    for key in ("User", "Group", "WorkingDirectory", "EnvironmentFile"):
        assert unit_value(MIGRATE_UNIT, "Service", key) == unit_value(WORKER_UNIT, "Service", key)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
@pytest.mark.parametrize("unit", [WORKER_UNIT, MIGRATE_UNIT], ids=lambda p: p.name)
def test_systemd_accepts_the_unit(unit: Path, tmp_path: Path) -> None:
    # verify checks that ExecStart's program exists: point it at this drover.
    program = unit_command(unit)[0]
    drover = Path(sys.executable).parent / "drover"
    assert drover.exists()
    copy = tmp_path / unit.name
    copy.write_text(unit.read_text().replace(program, str(drover)))
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # An unknown key or a malformed value is reported on stderr.
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_the_image_runs_the_worker_and_the_migration_with_drover_as_pid_1() -> None:
    steps = dockerfile()
    assert exec_form(only(steps, "ENTRYPOINT").text) == ["drover"]
    assert only(steps, "STOPSIGNAL").text == "SIGTERM"
    words = image_command()
    assert words[:2] == ["drover", "worker"]
    # In a container the ops port must be reachable from outside it.
    address = option_value(words, "--ops-addr")
    assert address.startswith("0.0.0.0:")
    assert only(steps, "EXPOSE").text == str(port_of(address))
    assert only(steps, "USER").text.isdigit()  # runAsNonRoot can check a numeric user
    assert "drover-queue" in (DEPLOY / "requirements.txt").read_text().split()


def test_the_images_healthcheck_asks_healthz_on_the_workers_port() -> None:
    healthcheck = only(dockerfile(), "HEALTHCHECK").text
    options, _, command = healthcheck.partition("CMD ")
    assert "--interval" in options
    probe = " ".join(exec_form(command))
    port = port_of(option_value(image_command(), "--ops-addr"))
    assert f"http://127.0.0.1:{port}/healthz" in probe


def test_the_image_copies_files_that_exist() -> None:
    copies = [step.text.split() for step in dockerfile() if step.keyword == "COPY"]
    assert copies
    for *sources, _destination in copies:
        for source in sources:
            assert (DEPLOY / source).exists(), source


def test_the_kubernetes_probes_ask_the_ops_endpoints_on_the_workers_port() -> None:
    container = only_container(K8S_WORKER, "Deployment")
    words = container_command(container)
    address = option_value(words, "--ops-addr")
    assert address.startswith("0.0.0.0:")  # the kubelet probes the pod's address
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    liveness = container["livenessProbe"]["httpGet"]
    readiness = container["readinessProbe"]["httpGet"]
    assert liveness["path"] == "/healthz"
    assert readiness["path"] == "/readyz"
    for probe in (liveness, readiness):
        assert ports[probe["port"]] == port_of(address)


def test_the_kubernetes_grace_period_covers_the_drain_budget() -> None:
    spec = pod_spec(K8S_WORKER, "Deployment")
    budget = float(option_value(container_command(spec["containers"][0]), "--shutdown-timeout"))
    assert spec["terminationGracePeriodSeconds"] >= budget + KILL_SLACK
    # No preStop: its time would come out of the same grace period.
    assert "lifecycle" not in spec["containers"][0]
    rollout = one_kind(K8S_WORKER, "Deployment")["spec"]["strategy"]["rollingUpdate"]
    assert rollout["maxUnavailable"] == 0


def test_the_kubernetes_worker_runs_the_images_own_command() -> None:
    container = only_container(K8S_WORKER, "Deployment")
    assert "command" not in container  # the image's ENTRYPOINT, drover
    assert container_command(container) == image_command()


def test_the_migration_job_runs_drover_migrate_on_the_workers_image() -> None:
    job = only_container(K8S_MIGRATE, "Job")
    assert container_command(job) == ["drover", "migrate"]
    assert job["image"] == only_container(K8S_WORKER, "Deployment")["image"]
    assert pod_spec(K8S_MIGRATE, "Job")["restartPolicy"] == "Never"


def test_the_manifests_take_the_database_url_from_a_secret() -> None:
    for container in (only_container(K8S_WORKER, "Deployment"), only_container(K8S_MIGRATE, "Job")):
        [env] = [e for e in container["env"] if e["name"] == "DATABASE_URL"]
        assert "value" not in env
        assert env["valueFrom"]["secretKeyRef"]["key"] == "url"


def test_the_guide_quotes_the_example_files_as_they_are() -> None:
    files = [p.read_text() for p in (WORKER_UNIT, MIGRATE_UNIT, DOCKERFILE, K8S_WORKER)]
    text = GUIDE.read_text()
    quoted = re.findall(r"^```(?:ini|dockerfile|yaml)\n(.*?)^```", text, re.M | re.S)
    assert len(quoted) >= 3
    for block in quoted:
        assert any(block in content for content in files), block


def test_the_guide_names_every_example_file() -> None:
    text = GUIDE.read_text()
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.name != "__init__.py":
            assert path.relative_to(DEPLOY).as_posix() in text, path
