"""The release workflow and the changelog: checked by syntax and shape, never run here."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

import drover
import drover._version

ROOT = Path(__file__).resolve().parents[2]


def _workflow(name: str = "release.yml") -> dict[Any, Any]:
    loaded = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    assert isinstance(loaded, dict)
    return loaded


def _triggers(workflow: dict[Any, Any]) -> Any:
    # YAML reads the key `on` as True.
    return workflow.get("on", workflow.get(True))


def test_the_release_workflow_publishes_tags_with_trusted_publishing() -> None:
    workflow = _workflow()
    assert _triggers(workflow) == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"] == {"contents": "read"}
    publish = workflow["jobs"]["publish"]
    assert publish["environment"] == "pypi"
    assert publish["permissions"] == {"id-token": "write"}
    uses = [step.get("uses", "") for step in publish["steps"]]
    assert any(u.startswith("pypa/gh-action-pypi-publish@") for u in uses)
    text = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert "password" not in text and "secrets." not in text  # no stored token
    build = " ".join(step.get("run", "") for step in workflow["jobs"]["build"]["steps"])
    assert "python -m build" in build and "twine check --strict" in build


def test_the_release_is_built_and_published_only_after_the_ci_checks_pass() -> None:
    jobs = _workflow()["jobs"]
    # The pull-request workflow, called as a reusable workflow on the tagged commit.
    assert jobs["ci"] == {"uses": "./.github/workflows/ci.yml"}
    assert jobs["build"]["needs"] == "ci"
    assert jobs["publish"]["needs"] == ["ci", "build"]


def test_the_ci_workflow_runs_ci_run_on_pull_requests_and_when_called() -> None:
    ci = _workflow("ci.yml")
    triggers = _triggers(ci)
    assert "pull_request" in triggers and "workflow_call" in triggers
    assert triggers["push"] == {"branches": ["main"]}
    assert ci["permissions"] == {"contents": "read"}
    (job,) = ci["jobs"].values()
    versions = next(s["with"]["python-version"] for s in job["steps"] if "with" in s)
    assert set(versions.split()) == {"3.11", "3.12"}  # 3.12 for nox -s django
    runs = [step["run"] for step in job["steps"] if "run" in step]
    assert runs == ["bash .ci/run"]


def test_the_changelog_follows_keep_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "[Keep a Changelog](https://keepachangelog.com/" in text
    assert "## Unreleased" in text and "### Added" in text and "### Changed" in text


def test_the_installed_version_is_the_projects() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert drover.__version__ == project["version"]


DISTRIBUTION = "drover-queue"  # `drover` on PyPI is someone else's project (ADR 0019)


def test_the_distribution_name_is_drover_queue_and_import_and_command_stay_drover() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION
    assert project["scripts"]["drover"].startswith("drover.")
    assert importlib.metadata.version(DISTRIBUTION) == drover.__version__
    assert DISTRIBUTION == drover._version.DISTRIBUTION
    assert (ROOT / "src" / "drover" / "__init__.py").exists()


def _install_lines() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    paths += sorted((ROOT / "src").rglob("*.py")) + sorted((ROOT / "examples").rglob("*"))
    for path in paths:
        if not path.is_file() or path.suffix not in {".md", ".py", ".txt", ".toml", ""}:
            continue
        if path.name == "0019-distribution-name.md":  # the record of the clash quotes it
            continue
        for line in path.read_text(errors="replace").splitlines():
            # Installing the project by name (not "-e ." or a peer's package).
            for match in re.finditer(r"pip install (?:-U )?['\"]?(drover[\w.-]*)", line):
                found.append((f"{path.relative_to(ROOT)}: {line.strip()}", match.group(1)))
    return found


def test_every_documented_install_names_the_distribution_not_pypis_drover() -> None:
    lines = _install_lines()
    assert len(lines) >= 5  # README's and the guides' install lines were found
    wrong = [where for where, name in lines if re.split(r"[\[\s'\"]", name)[0] != DISTRIBUTION]
    assert wrong == []


def test_the_release_workflow_names_the_pypi_project() -> None:
    text = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert f'"{DISTRIBUTION}" project' in text


def test_requirements_files_name_the_distribution() -> None:
    # A requirements line "drover" installs PyPI's unrelated project.
    files = [
        p
        for p in ROOT.rglob("requirements*.txt")
        if ".venv" not in p.parts and ".nox" not in p.parts
    ]
    assert files  # examples/deploy has one
    for path in files:
        for line in path.read_text().splitlines():
            name = re.split(r"[\s\[<>=!~;]", line.strip(), maxsplit=1)[0]
            if name.lower().startswith("drover"):
                assert name == DISTRIBUTION, f"{path.relative_to(ROOT)}: {line}"
