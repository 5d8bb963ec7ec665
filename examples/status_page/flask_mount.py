"""drover's status page mounted at /drover/ inside a Flask application, behind its own login.

Run, with ``DATABASE_URL`` and ``DROVER_ADMIN_PASSWORD`` set::

    flask --app 'flask_mount:create_app()' run

then open http://127.0.0.1:5000/drover/ (user ``admin``). The status page has no
authentication of its own: this example puts HTTP Basic in front of it, the way
an application would put its own session check.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.wrappers import Request, Response

import drover
from drover.web import make_app

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def require_admin(inner: WSGIApp, password: str) -> WSGIApp:
    """Only ``admin`` with ``password`` gets through; everyone else gets a 401."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        auth = Request(environ).authorization
        if (
            auth is None
            or auth.username != "admin"
            or not hmac.compare_digest((auth.password or "").encode(), password.encode())
        ):
            denied = Response("login required", status=401)
            denied.headers["WWW-Authenticate"] = 'Basic realm="drover"'
            return denied(environ, start_response)
        return inner(environ, start_response)

    return guarded


def create_app(database_url: str | None = None, admin_password: str | None = None) -> Flask:
    """The application; arguments default to ``$DATABASE_URL`` and ``$DROVER_ADMIN_PASSWORD``."""
    database_url = database_url or os.environ["DATABASE_URL"]
    admin_password = admin_password or os.environ["DROVER_ADMIN_PASSWORD"]
    app = Flask(__name__)

    @app.get("/")
    def index() -> str:
        return "the application; the job queue's status page is at /drover/"

    inspector = drover.Inspector(database_url)  # a small pool of its own
    app.extensions["drover_inspector"] = inspector  # close it when the app shuts down
    status = require_admin(make_app(inspector, refresh=10), admin_password)
    # Requests under /drover go to the status page with SCRIPT_NAME=/drover, so
    # its links and forms stay under the mount point.
    app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/drover": status})  # type: ignore[method-assign]
    return app
