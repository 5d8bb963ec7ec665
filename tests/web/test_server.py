"""``drover web`` as a real process: a real WSGI server, flags, and a clean exit on signals."""

from __future__ import annotations

import signal
import socket
import textwrap
import urllib.request

import pytest
from clihelp import cli, refused, run
from serve import drover_web

from drover.cli.web import exposure_warning


def _fetch(url: str) -> tuple[int, str, dict[str, str]]:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our own loopback URL
        return response.status, response.read().decode(), dict(response.headers)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serves_on_loopback_and_exits_0_on_a_signal(db_url: str, sig: signal.Signals) -> None:
    with drover_web(db_url, "--listen", "127.0.0.1:0") as (url, process):
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        status, body, headers = _fetch(url)
        assert status == 200 and "<h1>Overview</h1>" in body
        assert headers["Server"].startswith("drover")
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        process.send_signal(sig)
        _, err = process.communicate(timeout=10)
    assert process.returncode == 0, err
    assert "drover web stopped" in err
    assert "warning" not in err


def test_read_only_over_the_real_server(db_url: str) -> None:
    with drover_web(db_url, "--listen", "127.0.0.1:0", "--read-only", "--refresh", "0") as (url, _):
        _, body, _ = _fetch(url + "jobs")
        assert "read-only" in body and 'http-equiv="refresh"' not in body


ON_LOOPBACK_ANYWAY = textwrap.dedent(
    """
    import sys

    import waitress.server

    from drover.cli.app import main

    create_server = waitress.server.create_server


    def on_loopback(app, **kwargs):
        # The command decides the warning on the address it was given; the socket
        # itself stays on loopback, where the tests listen.
        kwargs["host"] = "127.0.0.1"
        return create_server(app, **kwargs)


    waitress.server.create_server = on_loopback
    sys.argv[0] = "drover"
    main()
    """
)


def test_a_non_loopback_address_without_read_only_warns(db_url: str) -> None:
    # The warning reaches stderr from the real command, without listening on every
    # interface: the server binds 127.0.0.1 whatever the command asked for.
    python = ("-c", ON_LOOPBACK_ANYWAY)
    with drover_web(db_url, "--listen", "0.0.0.0:0", python=python) as (url, process):
        assert url.startswith("http://127.0.0.1:")
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=10)
    assert "warning: serving on 0.0.0.0:0 without --read-only" in err
    assert process.returncode == 0


EVERY_INTERFACE = "0.0.0.0"  # noqa: S104 - an address to judge, never bound


@pytest.mark.parametrize(
    ("host", "read_only", "warns"),
    [
        (EVERY_INTERFACE, False, True),
        ("::", False, True),
        ("", False, True),
        ("192.0.2.7", False, True),
        ("2001:db8::7", False, True),
        ("status.example.org", False, True),
        ("localhost.example.org", False, True),
        ("127.0.0.1", False, False),
        ("127.0.0.2", False, False),
        ("::1", False, False),
        ("localhost", False, False),
        (EVERY_INTERFACE, True, False),
        ("::", True, False),
        ("192.0.2.7", True, False),
    ],
)
def test_the_warning_is_for_a_page_with_buttons_beyond_loopback(
    host: str, read_only: bool, warns: bool
) -> None:
    listen = f"[{host}]:7180" if ":" in host else f"{host}:7180"
    warning = exposure_warning(listen, host, read_only=read_only)
    if warns:
        assert warning is not None
        assert warning.startswith(f"drover: warning: serving on {listen} without --read-only")
    else:
        assert warning is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--json", "web"], "--json is not valid with web"),
        (["web", "--refresh", "0.5"], "--refresh must be 0 or between 1 and 86400"),
        (["web", "--listen", "nonsense"], "--listen must look like host:port"),
    ],
)
def test_bad_flags_are_usage_errors(db_url: str, args: list[str], message: str) -> None:
    assert message in refused(cli(db_url, *args), 2)


def test_a_busy_port_exits_1(db_url: str) -> None:
    # As a process: a server that failed to bind leaves sockets for exit to close.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run("web", "--listen", f"127.0.0.1:{port}", url=db_url)
    assert result.returncode == 1 and result.stdout == ""
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_a_database_without_the_schema_is_refused(empty_db_url: str) -> None:
    result = run("web", "--listen", "127.0.0.1:0", url=empty_db_url)
    assert result.returncode == 1 and "drover migrate" in result.stderr
