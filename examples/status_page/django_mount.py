"""drover's status page mounted at /drover/ beside a Django project, for staff users only.

In a project, the two pieces go in ``wsgi.py``::

    application = mount_status_page(get_wsgi_application(), Inspector(DATABASE_URL))

The status page has no authentication of its own; ``staff_only`` lets through
only requests whose Django session belongs to an active staff user (log in
through Django's admin first). This file is a complete one-file Django
project for the example and its test: ``DATABASE_URL=... python django_mount.py``
serves it with waitress on http://127.0.0.1:8000/.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import django
from django.conf import settings

import drover
from drover.web import make_app

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def configure(database_url: str) -> None:
    """Settings for this one-file project (a real project has its settings module)."""
    import psycopg

    parts = psycopg.conninfo.conninfo_to_dict(database_url)
    settings.configure(
        DEBUG=False,
        SECRET_KEY="example-only-not-secret",  # noqa: S106
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=__name__,
        USE_TZ=True,
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
        ],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": parts.get("dbname", ""),
                "HOST": parts.get("host", ""),
                "PORT": parts.get("port", ""),
                "USER": parts.get("user", ""),
                "PASSWORD": parts.get("password", ""),
            }
        },
    )
    django.setup()


def staff_only(inner: WSGIApp) -> WSGIApp:
    """Pass a request on only if its Django session is an active staff user's; else 403."""
    from django.contrib.auth import get_user
    from django.core.handlers.wsgi import WSGIRequest
    from django.db import close_old_connections
    from django.utils.module_loading import import_string

    session_store = import_string("django.contrib.sessions.backends.db.SessionStore")

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = WSGIRequest(dict(environ))
        request.session = session_store(request.COOKIES.get(settings.SESSION_COOKIE_NAME))
        try:
            user = get_user(request)
            allowed = user.is_active and user.is_staff
        finally:
            close_old_connections()
        if not allowed:
            start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"staff only: log in through the Django admin first\n"]
        return inner(environ, start_response)

    return guarded


def mount_status_page(django_app: WSGIApp, inspector: drover.Inspector) -> WSGIApp:
    """Route /drover/... to the status page (SCRIPT_NAME=/drover) and the rest to Django."""
    from werkzeug.middleware.dispatcher import DispatcherMiddleware

    return DispatcherMiddleware(django_app, {"/drover": staff_only(make_app(inspector))})


urlpatterns: list[Any] = []  # this example's Django side serves nothing of its own


def application_for(database_url: str) -> WSGIApp:
    """The whole project's WSGI application, as ``wsgi.py`` would build it."""
    configure(database_url)
    from django.core.wsgi import get_wsgi_application

    return mount_status_page(get_wsgi_application(), drover.Inspector(database_url))


if __name__ == "__main__":
    from waitress import serve

    serve(application_for(os.environ["DATABASE_URL"]), host="127.0.0.1", port=8000)
