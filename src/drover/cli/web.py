"""``drover web``: the status page on a real WSGI server (Waitress), until SIGINT or SIGTERM."""

from __future__ import annotations

import ipaddress
import signal
import threading
from types import FrameType
from typing import Any

import typer

from drover._address import parse_address
from drover.cli.common import fail, get_globals, open_inspector, usage
from drover.cli.logs import LOG_FORMAT_HELP, LOG_LEVEL_HELP, configure_logging, logging_choice
from drover.errors import ConfigError

__all__ = ["web_command"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(listen: str, host: str, *, read_only: bool) -> str | None:
    """The warning ``drover web`` prints for ``--listen LISTEN`` (host ``host``), or ``None``.

    A page with buttons warns unless its host is loopback: ``localhost`` or an
    address in 127.0.0.0/8 or ``::1``. Any other name, resolved or not, warns:
    the check never resolves it. A read-only page never warns.
    """
    if read_only or _loopback(host):
        return None
    return (
        f"drover: warning: serving on {listen} without --read-only: anyone who can reach "
        "it can retry, cancel and pause; put it behind your own authentication"
    )


def web_command(
    ctx: typer.Context,
    listen: str = typer.Option("127.0.0.1:7180", "--listen", help="host:port to serve on."),
    refresh: float = typer.Option(5.0, "--refresh", help="Seconds between reloads; 0 disables."),
    read_only: bool = typer.Option(False, "--read-only", help="No buttons; mutations are 403."),
    log_level: str | None = typer.Option(None, "--log-level", help=LOG_LEVEL_HELP),
    log_format: str | None = typer.Option(None, "--log-format", help=LOG_FORMAT_HELP),
) -> None:
    """Serve the status page (overview, jobs, retry/cancel, pause/resume) until SIGINT/SIGTERM.

    Logs to standard error (`--log-level`, `--log-format`), as `drover worker` does.
    """
    choice = logging_choice(log_level, log_format)
    g = get_globals(ctx)
    if g.json:
        usage("--json is not valid with web")
    if refresh != 0 and not 1 <= refresh <= 86_400:
        usage(f"--refresh must be 0 or between 1 and 86400 seconds, not {refresh:g}")
    try:
        host, port = parse_address(listen, "--listen")
    except ConfigError as exc:
        usage(str(exc))
    try:
        from waitress.server import create_server

        from drover.web import make_app
    except ImportError as exc:
        fail(f"drover web needs the web extra: pip install 'drover-queue[web]' ({exc})")
    configure_logging(choice)
    with open_inspector(g) as inspector:
        app = make_app(inspector, refresh=refresh, read_only=read_only)
        try:
            server: Any = create_server(app, host=host, port=port, threads=4, ident="drover")
        except OSError as exc:
            fail(f"cannot listen on {listen}: {exc}")
        bound_host, bound_port = server.effective_host, server.effective_port
        shown = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
        warning = exposure_warning(listen, host, read_only=read_only)
        if warning is not None:
            typer.echo(warning, err=True)
        stopping = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stopping.set()
            server.close()  # ends run(): waitress's loop exits once its sockets are closed

        # Handlers first, then the URL: whoever reads the URL may signal at once.
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        typer.echo(f"http://{shown}:{bound_port}/", color=False)
        try:
            server.run()
        except (OSError, ValueError):
            if not stopping.is_set():
                raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    typer.echo("drover web stopped", err=True)
    raise typer.Exit(0)
