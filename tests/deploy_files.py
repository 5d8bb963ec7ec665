"""The deployment examples (`examples/deploy/`) and the guides, as the tests read them.

Each deployment file runs a `drover` command line: the systemd units'
`ExecStart`, the Dockerfile's `ENTRYPOINT` and `CMD`, the Kubernetes
containers' `args` after the image's `ENTRYPOINT`. This module extracts those
command lines, and checks any `drover` command line against the real command
tree of the typer application, so a flag that does not exist (or a command that
does not) is caught without running anything.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer.main
import yaml

from drover.cli import app

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "examples" / "deploy"
GUIDE = ROOT / "docs" / "deployment.md"
CELERY_GUIDE = ROOT / "docs" / "coming-from-celery.md"
WORKER_UNIT = DEPLOY / "myapp-worker.service"
MIGRATE_UNIT = DEPLOY / "myapp-migrate.service"
DOCKERFILE = DEPLOY / "Dockerfile"
K8S_WORKER = DEPLOY / "kubernetes-worker.yaml"
K8S_MIGRATE = DEPLOY / "kubernetes-migrate.yaml"

SUPERVISOR_KILL_MARGIN = 10.0
"""Seconds past `--shutdown-timeout` the supervisor waits before it kills a
worker process (`Supervisor`'s docstring: "shutdown_timeout plus 10 s")."""


# --- systemd ---------------------------------------------------------------------------------


def unit_settings(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file as section -> key -> values (a key may repeat), comments dropped."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        header = re.fullmatch(r"\[(\w+)\]", line)
        if header:
            current = sections.setdefault(header[1], {})
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, f"{path.name}: not a key=value line: {raw!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def unit_value(path: Path, section: str, key: str) -> str:
    """The one value of `key` in `section`; fails when it is missing or repeated."""
    values = unit_settings(path).get(section, {}).get(key, [])
    assert len(values) == 1, f"{path.name}: [{section}] {key} = {values}"
    return values[0]


def unit_command(path: Path) -> list[str]:
    """`ExecStart` split into words, the program first."""
    return shlex.split(unit_value(path, "Service", "ExecStart"))


# --- the Dockerfile --------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    """Upper case: `FROM`, `RUN`, `CMD`, ..."""
    text: str
    """Everything after the keyword, continuation lines joined."""


def dockerfile(path: Path = DOCKERFILE) -> list[Instruction]:
    """The Dockerfile's instructions in order, with `\\` continuations joined."""
    instructions: list[Instruction] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        keyword, _, text = whole.partition(" ")
        instructions.append(Instruction(keyword.upper(), text.strip()))
    assert not pending, f"{path.name} ends inside a continuation"
    return instructions


def only(instructions: list[Instruction], keyword: str) -> Instruction:
    found = [i for i in instructions if i.keyword == keyword]
    assert len(found) == 1, f"expected one {keyword}, found {found}"
    return found[0]


def exec_form(text: str) -> list[str]:
    """An exec-form (JSON array) argument list; fails on the shell form."""
    value = json.loads(text)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), text
    return list(value)


def image_command() -> list[str]:
    """What the image runs by default: `ENTRYPOINT` followed by `CMD`."""
    steps = dockerfile()
    return exec_form(only(steps, "ENTRYPOINT").text) + exec_form(only(steps, "CMD").text)


def image_entrypoint() -> list[str]:
    return exec_form(only(dockerfile(), "ENTRYPOINT").text)


# --- Kubernetes ------------------------------------------------------------------------------


def manifests(path: Path) -> list[dict[str, Any]]:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert all(isinstance(d, dict) for d in documents), path.name
    return documents


def one_kind(path: Path, kind: str) -> dict[str, Any]:
    found = [d for d in manifests(path) if d.get("kind") == kind]
    assert len(found) == 1, f"{path.name}: expected one {kind}"
    return found[0]


def pod_spec(path: Path, kind: str) -> dict[str, Any]:
    spec: dict[str, Any] = one_kind(path, kind)["spec"]["template"]["spec"]
    return spec


def only_container(path: Path, kind: str) -> dict[str, Any]:
    [container] = pod_spec(path, kind)["containers"]
    assert isinstance(container, dict)
    return container


def container_command(container: dict[str, Any]) -> list[str]:
    """What a container runs: its `command` or the image's ENTRYPOINT, then its `args`."""
    command = container.get("command") or image_entrypoint()
    return [str(w) for w in command] + [str(w) for w in container.get("args", [])]


# --- drover command lines --------------------------------------------------------------------


def option_value(words: list[str], flag: str) -> str:
    """The value after `flag` (or in `flag=value`); fails when absent or repeated."""
    values = [words[i + 1] for i, w in enumerate(words[:-1]) if w == flag]
    values += [w.split("=", 1)[1] for w in words if w.startswith(flag + "=")]
    assert len(values) == 1, f"{flag} in {words}: {values}"
    return values[0]


def port_of(address: str) -> int:
    host, _, port = address.rpartition(":")
    assert host and port.isdigit(), address
    return int(port)


def check_drover_command(words: list[str]) -> list[str]:
    """Problems with a `drover ...` command line (after the program), checked against the CLI.

    Every word naming a command must be one, and every `--flag` must be an option
    of the command it follows or a global option. Returns the problems found:
    none for a command line the CLI would accept. (The command tree is typer's;
    it is read by duck typing, since typer may bring its own copy of click.)
    """
    root: Any = typer.main.get_command(app)
    global_options = _options(root)
    command: Any = root
    path: list[str] = []
    problems: list[str] = []
    expects_value = False
    for word in words:
        if expects_value:
            expects_value = False
            continue
        if word.startswith("-"):
            flag = word.split("=", 1)[0]
            if flag not in _options(command) | global_options:
                problems.append(f"`drover {' '.join(path)}` has no option {flag}")
                continue
            expects_value = "=" not in word and _takes_value([command, root], flag)
            continue
        subcommands = getattr(command, "commands", None)
        if subcommands is not None:
            if word not in subcommands:
                problems.append(f"`drover {' '.join(path)}` has no command {word!r}")
                break
            command = subcommands[word]
            path.append(word)
    if getattr(command, "commands", None) is not None and not problems:
        problems.append(f"`drover {' '.join(path)}` names a group, not a command")
    return problems


def _option_params(command: Any) -> list[Any]:
    return [p for p in command.params if getattr(p, "param_type_name", "") == "option"]


def _options(command: Any) -> set[str]:
    names = {"--help"}
    for param in _option_params(command):
        names.update(param.opts)
        names.update(param.secondary_opts)
    return names


def _takes_value(commands: list[Any], flag: str) -> bool:
    for command in commands:
        for param in _option_params(command):
            if flag in param.opts:
                return not param.is_flag
    return False


def drover_commands_in_text(text: str) -> list[list[str]]:
    """Every `drover ...` command line in a page's shell blocks and inline code.

    A shell line is one command (continuation lines joined); inline code counts
    when it starts with `drover ` and has no placeholder in it (`[...]`, `...`,
    `|`, `<...>`): those are syntax summaries, not command lines.
    """
    found: list[list[str]] = []
    for block in re.findall(r"^```(?:sh|bash|console)\n(.*?)^```", text, re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = _drover_words(line.strip())
            if words is not None:
                found.append(words)
    for code in re.findall(r"`([^`\n]+)`", text):
        if code.startswith("drover ") and not re.search(r"[\[\]|<>]|\.\.\.|…", code):
            words = _drover_words(code)
            if words is not None:
                found.append(words)
    return found


def _drover_words(line: str) -> list[str] | None:
    if line.startswith("#") or not line:
        return None
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    # Environment assignments and a path before the program are allowed:
    # `DATABASE_URL=... /srv/app/.venv/bin/drover worker ...`.
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        words = words[1:]
    if not words or Path(words[0]).name != "drover":
        return None
    return words[1:]
