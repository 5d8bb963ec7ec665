"""Django settings for the `manage.py drover worker` tests (`test_cli_django.py`).

The database is `$DATABASE_URL`. `$DJ_WORKERS`, when set, is `DROVER["WORKERS"]`;
`$DJ_LOGGING=root` gives the project a `LOGGING` setting with a root handler.
"""

from __future__ import annotations

import os

import psycopg

_db = psycopg.conninfo.conninfo_to_dict(os.environ["DATABASE_URL"])

SECRET_KEY = "drover-tests-not-secret"
USE_TZ = True
INSTALLED_APPS = ["drover.contrib.django"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", ""),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}
DROVER: dict[str, object] = {"CONFIG": {"poll_interval": 0.05}}
if os.environ.get("DJ_WORKERS"):
    DROVER["WORKERS"] = os.environ["DJ_WORKERS"]
if os.environ.get("DJ_LOGGING") == "root":
    LOGGING = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"app": {"format": "DJANGOAPP %(levelname)s %(name)s %(message)s"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "app"}},
        "root": {"handlers": ["console"], "level": "INFO"},
    }
