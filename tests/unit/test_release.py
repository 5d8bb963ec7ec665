"""The release workflow and the changelog: checked by syntax and shape, never run here."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

import drover

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
