"""The deployment guide and the Celery guide name only what exists.

Their python blocks run in `tests/db/test_readme.py`; this checks the rest of
what they say: every `drover ...` command line (in shell blocks, inline code and
the deployment files) uses real commands and flags, and every API name in
prose (`drover.X`, `Config.field`, `job.attribute`, ...) resolves.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest
from deploy_files import (
    CELERY_GUIDE,
    GUIDE,
    K8S_MIGRATE,
    K8S_WORKER,
    MIGRATE_UNIT,
    WORKER_UNIT,
    check_drover_command,
    container_command,
    drover_commands_in_text,
    image_command,
    only_container,
    unit_command,
)

import drover

GUIDES = [GUIDE, CELERY_GUIDE]

# How the guides refer to an instance: `job.context`, `client.insert_tx`, ...
INSTANCES: dict[str, type] = {
    "job": drover.Job,
    "client": drover.Client,
    "inspector": drover.Inspector,
}
CLASSES: dict[str, type] = {
    name: getattr(drover, name)
    for name in ("Config", "InsertOpts", "Job", "JobRow", "Worker", "Client", "Inspector")
}


def _has(cls: type, name: str) -> bool:
    if dataclasses.is_dataclass(cls) and name in {f.name for f in dataclasses.fields(cls)}:
        return True
    return name in getattr(cls, "_fields", ()) or hasattr(cls, name)


def _resolves(dotted: str) -> bool:
    """`drover.X.Y`: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if isinstance(target, type) and _has(target, name):
                target = getattr(target, name, target)
                continue
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def api_names(text: str) -> dict[str, set[str]]:
    """What a page names: dotted `drover.` paths, `Class.member` and `instance.member`."""
    dotted = set(re.findall(r"(?<![\w/.-])(drover(?:\.[A-Za-z_]\w*)+)", text))
    members = set(re.findall(rf"\b({'|'.join(CLASSES)})\.([a-z_]\w*)", text))
    on_instances = set(re.findall(rf"(?<![\w.])({'|'.join(INSTANCES)})\.([a-z_]\w*)", text))
    return {
        "dotted": dotted,
        "members": {f"{c}.{m}" for c, m in members},
        "instances": {f"{i}.{m}" for i, m in on_instances},
    }


def unresolved(text: str) -> list[str]:
    names = api_names(text)
    missing = [d for d in names["dotted"] if not _resolves(d)]
    for pair in names["members"]:
        cls, member = pair.split(".")
        if not _has(CLASSES[cls], member):
            missing.append(pair)
    for pair in names["instances"]:
        instance, member = pair.split(".")
        if not _has(INSTANCES[instance], member):
            missing.append(pair)
    return sorted(missing)


@pytest.mark.parametrize("page", GUIDES, ids=lambda p: p.name)
def test_every_api_name_in_the_guide_exists(page: Path) -> None:
    text = page.read_text()
    names = api_names(text)
    assert len(names["dotted"]) >= 5 and names["members"] and names["instances"], names
    assert unresolved(text) == []


def test_a_name_that_does_not_exist_is_caught() -> None:
    text = (
        "`drover.Chord`, `drover.contrib.django.delay_on_commit`, `Config.rate_limit`, "
        "`InsertOpts.rate_limit`, `job.retry`, and the real `drover.Cancel` and `Config.queues`"
    )
    assert unresolved(text) == [
        "Config.rate_limit",
        "InsertOpts.rate_limit",
        "drover.Chord",
        "drover.contrib.django.delay_on_commit",
        "job.retry",
    ]


def test_the_config_fields_the_guides_name_are_fields() -> None:
    fields = {f.name for f in dataclasses.fields(drover.Config)}
    named = {m for page in GUIDES for m in re.findall(r"\bConfig\.([a-z_]\w*)", page.read_text())}
    named -= {"replace", "plugin"}  # the methods
    assert {"shutdown_timeout", "lease_duration", "plugins", "retry_policy"} <= named
    assert named <= fields, named - fields


def _command_lines() -> list[list[str]]:
    lines = [words for page in GUIDES for words in drover_commands_in_text(page.read_text())]
    lines += [unit_command(WORKER_UNIT)[1:], unit_command(MIGRATE_UNIT)[1:]]
    lines.append(image_command()[1:])
    lines.append(container_command(only_container(K8S_WORKER, "Deployment"))[1:])
    lines.append(container_command(only_container(K8S_MIGRATE, "Job"))[1:])
    return lines


def test_every_drover_command_line_uses_real_commands_and_flags() -> None:
    lines = _command_lines()
    commands = {words[0] for words in lines if words}
    assert {"worker", "migrate", "cancel", "web", "stats"} <= commands, commands
    flags = {w for words in lines for w in words if w.startswith("--")}
    assert {"--ops-addr", "--shutdown-timeout", "--processes", "--concurrency"} <= flags
    problems = [f"{' '.join(words)}: {p}" for words in lines for p in check_drover_command(words)]
    assert problems == []


def test_a_command_line_that_would_not_parse_is_caught() -> None:
    assert check_drover_command(["worker", "a:b", "--concurrency", "8"]) == []
    assert check_drover_command(["--json", "jobs", "list", "--state", "dead"]) == []
    assert check_drover_command(["worker", "a:b", "--rate-limit", "5"]) == [
        "`drover worker` has no option --rate-limit"
    ]
    assert check_drover_command(["beat"]) == ["`drover ` has no command 'beat'"]
    assert check_drover_command(["jobs"]) == ["`drover jobs` names a group, not a command"]


def test_inline_command_summaries_are_not_taken_for_command_lines() -> None:
    text = "Run `drover worker APP [--processes N]` or `drover migrate --status`.\n"
    assert drover_commands_in_text(text) == [["migrate", "--status"]]
