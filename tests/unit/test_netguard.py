"""The loopback guard (tests/netguard.py): the suite refuses to listen beyond loopback."""

from __future__ import annotations

import socket

import netguard
import pytest

EVERY_INTERFACE = "0.0.0.0"  # noqa: S104 - what the guard must refuse


@pytest.mark.parametrize(
    ("family", "address"),
    [
        (socket.AF_INET, ("127.0.0.1", 0)),
        (socket.AF_INET, ("127.0.0.2", 0)),
        (socket.AF_INET, ("localhost", 0)),
        (socket.AF_INET6, ("::1", 0, 0, 0)),
        (socket.AF_INET6, ("::ffff:127.0.0.1", 0, 0, 0)),
        (socket.AF_UNIX, "/tmp/drover-test.sock"),  # noqa: S108 - never created
    ],
)
def test_loopback_and_local_sockets_pass(family: int, address: object) -> None:
    assert netguard.problem(family, address) is None


@pytest.mark.parametrize(
    ("family", "address"),
    [
        (socket.AF_INET, (EVERY_INTERFACE, 0)),
        (socket.AF_INET, ("", 0)),
        (socket.AF_INET, ("192.0.2.7", 0)),
        (socket.AF_INET, ("status.example.org", 0)),
        (socket.AF_INET6, ("::", 0, 0, 0)),
        (socket.AF_INET6, ("2001:db8::7", 0, 0, 0)),
        (socket.AF_INET6, ("::ffff:192.0.2.7", 0, 0, 0)),
    ],
)
def test_every_other_address_is_a_problem(family: int, address: object) -> None:
    assert netguard.problem(family, address) is not None


def test_a_bind_beyond_loopback_is_refused_and_names_the_test() -> None:
    with socket.socket() as sock, pytest.raises(OSError, match="loopback addresses only") as err:
        sock.bind((EVERY_INTERFACE, 0))
    this_test = (
        "tests/unit/test_netguard.py::test_a_bind_beyond_loopback_is_refused_and_names_the_test"
    )
    assert this_test in str(err.value)
    assert netguard.violations == [
        f"{this_test} bound ('0.0.0.0', 0): '0.0.0.0' is not a loopback address"
    ]
    # The autouse check would fail this test for the refused bind; it was on purpose.
    netguard.violations.clear()


def test_a_loopback_bind_goes_through() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        assert sock.getsockname()[0] == "127.0.0.1"
    assert netguard.violations == []
