"""The release workflow and the changelog: checked by syntax and shape, never run here."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

import drover

ROOT = Path(__file__).resolve().parents[2]


def _workflow() -> dict[Any, Any]:
    loaded = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_release_workflow_publishes_tags_with_trusted_publishing() -> None:
    workflow = _workflow()
    # YAML reads the key `on` as True.
    triggers = workflow.get("on", workflow.get(True))
    assert triggers == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"] == {"contents": "read"}
    publish = workflow["jobs"]["publish"]
    assert publish["needs"] == "build" and publish["environment"] == "pypi"
    assert publish["permissions"] == {"id-token": "write"}
    uses = [step.get("uses", "") for step in publish["steps"]]
    assert any(u.startswith("pypa/gh-action-pypi-publish@") for u in uses)
    text = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert "password" not in text and "secrets." not in text  # no stored token
    build = " ".join(step.get("run", "") for step in workflow["jobs"]["build"]["steps"])
    assert "python -m build" in build and "twine check --strict" in build


def test_the_changelog_follows_keep_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "[Keep a Changelog](https://keepachangelog.com/" in text
    assert "## Unreleased" in text and "### Added" in text and "### Changed" in text


def test_the_installed_version_is_the_projects() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert drover.__version__ == project["version"]
