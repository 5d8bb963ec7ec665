"""A loopback TCP proxy that can cut, black-hole or refuse connections on demand.

The network-partition stand-in of the fault suite: workers connect to
PostgreSQL through it, and the nemesis switches its mode. ``blackhole`` is the
half-open case: sockets stay open and the proxy swallows every byte, so the
kernel keeps acknowledging and neither TCP keepalives nor
``tcp_user_timeout`` notice; only a client-side deadline does.
"""

from __future__ import annotations

import contextlib
import enum
import selectors
import socket
import struct
import threading

from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = ["Mode", "TcpProxy", "proxy_target"]


def proxy_target(conninfo: str) -> tuple[str, int] | str:
    """Where a proxy for ``conninfo`` must connect: ``(host, port)``, or a Unix socket path.

    A host that is a directory (libpq's convention for Unix sockets) yields
    PostgreSQL's socket file in it, ``<dir>/.s.PGSQL.<port>``.
    """
    params = conninfo_to_dict(conninfo)
    host = str(params.get("host") or "localhost").split(",")[0]
    port = int(str(params.get("port") or "5432").split(",")[0])
    if host.startswith("/"):
        return f"{host}/.s.PGSQL.{port}"
    return (host, port)


class Mode(enum.Enum):
    """How the proxy treats traffic."""

    PASS = "pass"  # noqa: S105 - a mode name, not a password
    """Forward bytes both ways."""
    BLACKHOLE = "blackhole"
    """Keep every socket open and drop every byte (half-open)."""
    REFUSE = "refuse"
    """Close new connections at once; established ones keep passing."""


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``; one daemon thread, one selector.

    ``via(url)`` rewrites a libpq URL or conninfo to go through the proxy.

    Thread safety: ``set_mode`` and ``cut`` may be called from any
    thread while connections flow; they take effect on the proxy's next
    select round (within ``_TICK`` seconds). ``close`` stops the thread
    and closes every socket. Usable as a context manager.
    """

    _TICK = 0.05

    def __init__(self, target: tuple[str, int] | str) -> None:
        self._target = target
        """``(host, port)`` for TCP, or a Unix socket path (PostgreSQL's ``.s.PGSQL.<port>``)."""
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        """The port clients connect to."""
        self._mode = Mode.PASS
        self._cut_requested = False
        self._lock = threading.Lock()
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()

    def via(self, conninfo: str) -> str:
        """``conninfo`` with its host and port replaced by the proxy's."""
        return make_conninfo(conninfo, host="127.0.0.1", port=str(self.port))

    @property
    def mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode) -> None:
        """Switch how traffic is treated from the next round on."""
        with self._lock:
            self._mode = mode

    def cut(self) -> None:
        """Reset every established connection (new ones are accepted per the mode)."""
        with self._lock:
            self._cut_requested = True

    @property
    def connections(self) -> int:
        """Client connections currently open through the proxy."""
        with self._lock:
            return len(self._pairs) // 2

    def close(self) -> None:
        """Stop forwarding and close every socket."""
        self._stop.set()
        self._thread.join(5)
        with contextlib.suppress(OSError):
            self._listener.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                with self._lock:
                    mode, cut = self._mode, self._cut_requested
                    self._cut_requested = False
                if cut:
                    for sock in list(self._pairs):
                        self._drop(selector, sock, reset=True)
                for key, _ in selector.select(self._TICK):
                    ready = key.fileobj
                    if ready is self._listener:
                        self._accept(selector, mode)
                    elif isinstance(ready, socket.socket) and ready in self._pairs:
                        self._forward(selector, ready, mode)
        finally:
            for sock in list(self._pairs):
                self._drop(selector, sock, reset=False)
            selector.close()

    def _accept(self, selector: selectors.BaseSelector, mode: Mode) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        if mode is Mode.REFUSE:
            client.close()
            return
        try:
            if isinstance(self._target, str):
                upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                upstream.settimeout(2)
                upstream.connect(self._target)
            else:
                upstream = socket.create_connection(self._target, timeout=2)
        except OSError:
            client.close()
            return
        for sock in (client, upstream):
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        with self._lock:
            self._pairs[client] = upstream
            self._pairs[upstream] = client

    def _forward(self, selector: selectors.BaseSelector, sock: socket.socket, mode: Mode) -> None:
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(selector, sock, reset=False)
            return
        if mode is Mode.BLACKHOLE:
            return  # read and swallowed: the sender's kernel saw it acknowledged
        peer = self._pairs[sock]
        try:
            peer.setblocking(True)
            peer.settimeout(2)
            peer.sendall(data)
            peer.setblocking(False)
        except OSError:
            self._drop(selector, sock, reset=False)

    def _drop(self, selector: selectors.BaseSelector, sock: socket.socket, *, reset: bool) -> None:
        with self._lock:
            peer = self._pairs.pop(sock, None)
            if peer is not None:
                self._pairs.pop(peer, None)
        for s in (sock, peer):
            if s is None:
                continue
            with contextlib.suppress(KeyError, ValueError):
                selector.unregister(s)
            if reset:
                # SO_LINGER 0: close sends RST, as a middlebox dropping the flow would.
                with contextlib.suppress(OSError):
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                s.close()
