"""Settings of the example project: one PostgreSQL database from ``$DATABASE_URL``."""

from __future__ import annotations

import os

import django
import psycopg

_db = psycopg.conninfo.conninfo_to_dict(os.environ["DATABASE_URL"])

SECRET_KEY = "example-project-not-secret"  # noqa: S105
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "project.urls"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "drover.contrib.django",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", ""),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
        # Every request in one transaction: the order and its job commit together.
        "ATOMIC_REQUESTS": True,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DROVER = {
    "DATABASE": "default",
    "WORKERS": "shop.jobs.workers",
    "CONFIG": {"poll_interval": 0.2, "queues": {"default": 1, "mail": 1}},
}

if django.VERSION >= (6, 0):
    # Django's own task API, stored and run by drover.
    TASKS = {
        "default": {
            "BACKEND": "drover.contrib.django.DroverTaskBackend",
            "QUEUES": ["default", "mail"],
            "OPTIONS": {"max_attempts": 1},  # a failing task fails at once; raise for retries
        }
    }
