"""Tests listen on loopback only: a guard on ``socket.bind`` in the test process.

``conftest.py`` installs it for the whole session and names the running test in
:data:`state`. A bind to any other address (``0.0.0.0``, ``::``, ``""``, a
routable address, a host name other than ``localhost``) is refused with an
``OSError`` naming the test, before the socket is bound, and recorded in
:data:`violations`, which ``conftest.py``'s autouse check turns into a failure of
that test even when the error was swallowed on another thread.

It sees this process only. A subprocess (``drover web``, ``drover worker
--ops-addr``, a worker script) is outside it: give those loopback addresses
(``127.0.0.1:0``) in the test itself.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Any

__all__ = ["install", "problem", "state", "violations"]

state = {"test": "(outside any test)"}
"""The test running now, as conftest.py last set it (its node id)."""

violations: list[str] = []
"""One line per refused bind since the last check: the test and the address."""

_real_bind = socket.socket.bind


def problem(family: int, address: Any) -> str | None:
    """Why binding ``address`` in ``family`` would reach beyond loopback, or ``None``.

    Only IPv4 and IPv6 sockets are judged (a Unix socket is local by nature).
    Loopback is ``localhost``, 127.0.0.0/8, ``::1`` and 127.0.0.0/8 mapped into
    IPv6; a host name is never resolved.
    """
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not isinstance(host, str):
        return f"{address!r} is not an address the guard understands"
    if host == "localhost":
        return None
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return f"{host!r} is not a loopback address (every interface, or a name)"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return None if ip.is_loopback else f"{host!r} is not a loopback address"


def _guarded_bind(self: socket.socket, address: Any) -> None:
    wrong = problem(self.family, address)
    if wrong is not None:
        test = state["test"]
        violations.append(f"{test} bound {address!r}: {wrong}")
        raise OSError(
            errno.EADDRNOTAVAIL,
            f"tests bind loopback addresses only: {test} bound {address!r}: {wrong} "
            "(tests/netguard.py)",
        )
    _real_bind(self, address)


def install() -> None:
    """Guard every ``socket.socket.bind`` of this process from now on (idempotent)."""
    socket.socket.bind = _guarded_bind  # type: ignore[method-assign,assignment]
