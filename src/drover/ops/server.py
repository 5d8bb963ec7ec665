"""The ops HTTP listener: /metrics, /healthz and /readyz on a dedicated port."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from drover._address import parse_address
from drover.errors import ConfigError

__all__ = ["OpsServer"]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


class OpsServer:
    """Serves this client's registry and its health on a dedicated listener.

    The socket is bound in the constructor, so a bad or busy address fails
    ``Client.start()`` before anything else starts. ``/healthz`` is always 200
    (the process answers); ``/readyz`` asks ``ready()``, which is a memory read.
    Only GET is allowed; unknown paths are 404.
    """

    def __init__(
        self,
        addr: str,
        *,
        registry: CollectorRegistry,
        ready: Callable[[], tuple[bool, str]],
        client_id: str,
        logger: logging.Logger,
    ) -> None:
        host, port = parse_address(addr)
        log = logger

        class Handler(BaseHTTPRequestHandler):
            server_version = "drover"
            protocol_version = "HTTP/1.1"

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    self._send(200, b"ok\n", "text/plain; charset=utf-8")
                elif path == "/readyz":
                    ok, reason = ready()
                    body = (reason + "\n").encode()
                    self._send(200 if ok else 503, body, "text/plain; charset=utf-8")
                else:
                    self._send(404, b"not found\n", "text/plain; charset=utf-8")

            def _not_allowed(self) -> None:
                self.send_response(405)
                self.send_header("Allow", "GET")
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed

            def log_message(self, format: str, *args: object) -> None:
                log.debug("ops request: " + format, *args)

        try:
            self._server = _Server((host, port), Handler)
        except OSError as exc:
            raise ConfigError(f'listen on ops address "{addr}": {exc}') from None
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"drover-ops-{client_id}",
            daemon=True,
        )
        self._log = logger

    @property
    def address(self) -> tuple[str, int]:
        """The bound host and port (useful with port 0)."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket; joins the serving thread."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()
