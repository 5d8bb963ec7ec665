"""``host:port`` parsing shared by the ops listener and every other socket drover binds."""

from __future__ import annotations

from drover.errors import ConfigError

__all__ = ["parse_address"]


def parse_address(addr: str, what: str = "Config.ops_addr") -> tuple[str, int]:
    """``"127.0.0.1:9090"`` → ``("127.0.0.1", 9090)``; ``"[::1]:9090"`` for IPv6.

    An empty host means loopback. Raises ``drover.ConfigError`` naming
    ``what`` when ``addr`` is not ``host:port`` with a port in 0..65535.
    """
    if not isinstance(addr, str):
        raise ConfigError(f"{what} must be a 'host:port' string, not {addr!r}")
    host, sep, port = addr.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{what} must look like host:port, not {addr!r}")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)
