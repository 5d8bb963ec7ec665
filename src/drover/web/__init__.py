"""drover's status page: ``make_app`` builds a WSGI application over an Inspector.

Needs the ``web`` extra (``pip install 'drover-queue[web]'``: Jinja2, Werkzeug and,
for ``drover web``, Waitress).
"""

from __future__ import annotations

from drover.web.app import StatusPage, make_app

__all__ = ["StatusPage", "make_app"]
