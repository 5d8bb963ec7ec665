"""``drover limits list | set | clear | delete``: see and override cluster-wide limits.

Every subcommand goes through the Inspector: a change holds from every
client's next claim, and wakes the listening ones at once. Keys and values
are checked before the database is opened, so a usage error (exit 2) writes
nothing; clearing or deleting what is not there is refused (exit 1).
"""

from __future__ import annotations

from typing import Any

import typer

import drover
from drover.cli import output as out
from drover.cli.common import Globals, emit, fail, get_globals, open_inspector, usage
from drover.limits import (
    LimitKey,
    LimitState,
    check_override,
    parse_limit_key,
    parse_period,
    period_text,
)

__all__ = ["limit_dict", "limits_app"]

limits_app = typer.Typer(
    help="See and override cluster-wide limits (concurrency and rate per kind or queue).",
    no_args_is_help=True,
    rich_markup_mode=None,
)

_KEY_HELP = "kind:KIND, kind:KIND[field] (per value of that args field) or queue:QUEUE."


def _key(text: str) -> LimitKey:
    try:
        return parse_limit_key(text)
    except drover.InvalidLimit as exc:
        usage(str(exc))


def _values(concurrency: int | None, rate: int | None, per: Any, counts: str = "claims") -> str:
    parts = []
    if concurrency is not None:
        parts.append(f"concurrency {concurrency}")
    if rate is not None:
        of = " (handler starts)" if counts == "starts" else ""
        parts.append(f"rate {rate} per {period_text(per)}{of}")
    return ", ".join(parts) or "no values"


def _source(state: LimitState) -> str:
    if state.declared is None:
        return "operator"
    return "declared" if state.override is None else "overridden"


def _summary(state: LimitState) -> str:
    """One line for people: the values in force, and what code declares under an override."""
    line = f"{state.key}: {_values(state.concurrency, state.rate, state.per, state.counts)}"
    if state.declared is None:
        return f"{line} (set by an operator; no code declares it)"
    if state.override is None:
        return f"{line} (as its code declares)"
    declared = state.declared
    return (
        f"{line} (overridden; its code declares "
        f"{_values(declared.concurrency, declared.rate, declared.per)})"
    )


def _full(state: LimitState) -> str:
    if state.key.partition_by is None:
        return "yes" if state.partitions_full else "no"
    return f"{state.partitions_full}/{state.partitions}"


def _values_dict(concurrency: int | None, rate: int | None, per: Any) -> dict[str, Any]:
    return {
        "concurrency": concurrency,
        "rate": rate,
        "per_seconds": per.total_seconds() if rate is not None else None,
    }


def limit_dict(state: LimitState) -> dict[str, Any]:
    """A limit as stable snake_case keys (``--json``)."""
    declared, override = state.declared, state.override
    return {
        "key": str(state.key),
        "scope": state.key.scope,
        "target": state.key.target,
        "partition_by": state.key.partition_by,
        **_values_dict(state.concurrency, state.rate, state.per),
        "counts": state.counts,
        "source": _source(state),
        "declared": None
        if declared is None
        else _values_dict(declared.concurrency, declared.rate, declared.per),
        "override": None
        if override is None
        else _values_dict(override.concurrency, override.rate, override.per),
        "running": state.running,
        "started": state.started,
        "partitions": state.partitions,
        "partitions_full": state.partitions_full,
        "busiest": [
            {"value": p.value, "running": p.running, "started": p.started, "full": p.full}
            for p in state.busiest
        ],
        "updated_at": out.timestamp(state.updated_at),
    }


@limits_app.command("list")
def limits_list_command(ctx: typer.Context) -> None:
    """Every limit: its values, who set them, and its use now (running, starts in the window)."""
    g = get_globals(ctx)
    with open_inspector(g) as inspector:
        states = inspector.limits()
    human = out.table(
        ["LIMIT", "CONCURRENCY", "RUNNING", "RATE", "PER", "STARTED", "FULL", "SOURCE"],
        [
            (
                s.key,
                "-" if s.concurrency is None else s.concurrency,
                s.running,
                "-" if s.rate is None else s.rate,
                "-" if s.rate is None else period_text(s.per),
                "-" if s.rate is None else s.started,
                _full(s),
                _source(s),
            )
            for s in states
        ],
    )
    busiest = [
        f"{s.key} busiest: "
        + ", ".join(
            f"{p.value} ({p.running} running, {p.started} started{', full' if p.full else ''})"
            for p in s.busiest
        )
        for s in states
        if s.busiest
    ]
    if busiest:
        human += "\n\n" + "\n".join(busiest)
    if not states:
        human = "no limits: no code declares one and no operator set one"
    emit(g, human, {"limits": [limit_dict(s) for s in states]})


@limits_app.command("set")
def limits_set_command(
    ctx: typer.Context,
    key: str = typer.Argument(..., metavar="KEY", help=_KEY_HELP),
    concurrency: int | None = typer.Option(
        None, "--concurrency", help="At most this many jobs of the scope running at once."
    ),
    rate: int | None = typer.Option(
        None, "--rate", help="At most this many jobs of the scope starting per period."
    ),
    per: str | None = typer.Option(
        None, "--per", help="The rate's period: second, minute, hour or seconds (with --rate)."
    ),
) -> None:
    """Override a limit's values for every client (creating it if no code declares it)."""
    g = get_globals(ctx)
    parsed = _key(key)
    if concurrency is None and rate is None:
        usage("limits set needs --concurrency N or --rate N (with --per), or both")
    if per is not None and rate is None:
        usage("--per is the period of --rate; give --rate too")
    try:
        period = None if per is None else parse_period(per, "--per")
        _, _, checked_per = check_override(concurrency, rate, period, "limits set")
    except drover.InvalidLimit as exc:
        # What is left is one value's own rule: name it by its flag.
        usage(str(exc).replace("limits set ", "--", 1))
    with open_inspector(g) as inspector:
        state = inspector.set_limit(parsed, concurrency=concurrency, rate=rate, per=checked_per)
    emit(g, _summary(state), limit_dict(state))


def _after_clear(g: Globals, parsed: LimitKey, states: list[LimitState]) -> None:
    now = next((s for s in states if s.key == parsed), None)
    if now is None:
        emit(
            g,
            f"removed {parsed}: no code declares it",
            {"key": str(parsed), "cleared": True, "limit": None},
        )
        return
    emit(
        g,
        f"cleared the override of {parsed}: "
        f"{_values(now.concurrency, now.rate, now.per)}, as its code declares",
        {"key": str(parsed), "cleared": True, "limit": limit_dict(now)},
    )


@limits_app.command("clear")
def limits_clear_command(
    ctx: typer.Context, key: str = typer.Argument(..., metavar="KEY", help=_KEY_HELP)
) -> None:
    """Drop an operator's override: the declared values apply again; an undeclared limit goes."""
    g = get_globals(ctx)
    parsed = _key(key)
    with open_inspector(g) as inspector:
        cleared = inspector.clear_limit(parsed)
        # Read again to say what applies now (a concurrent change may already
        # show: the message is about the limit as it stands).
        states = inspector.limits()
    if not cleared:
        if any(s.key == parsed for s in states):
            fail(f"limit {parsed} has no override to clear: it is as its code declares")
        fail(f"no limit {parsed}: nothing to clear")
    _after_clear(g, parsed, states)


@limits_app.command("delete")
def limits_delete_command(
    ctx: typer.Context, key: str = typer.Argument(..., metavar="KEY", help=_KEY_HELP)
) -> None:
    """Remove a limit whole, declared or not (a client declaring it writes it again at start)."""
    g = get_globals(ctx)
    parsed = _key(key)
    with open_inspector(g) as inspector:
        deleted = inspector.delete_limit(parsed)
    if not deleted:
        fail(f"no limit {parsed}: nothing to delete")
    emit(g, f"deleted {parsed}", {"key": str(parsed), "deleted": True})
