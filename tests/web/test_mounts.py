"""The README's two mounts, as the examples in examples/status_page/ build them, end to end."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
from werkzeug.test import Client

import drover

Conn = psycopg.Connection[tuple[Any, ...]]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "status_page"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dead(conn: Conn) -> int:
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, state, finalized_at, attempt) "
        "VALUES ('report', 'dead', now(), 1) RETURNING id"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_flask_mount_serves_the_page_under_drover_behind_basic_auth(
    db_url: str, conn: Conn
) -> None:
    dead = _dead(conn)
    app = _load("flask_mount").create_app(db_url, "s3cret")
    try:
        client = Client(app)
        assert client.get("/").text.startswith("the application")
        assert client.get("/drover/").status_code == 401
        login = {"Authorization": "Basic " + base64.b64encode(b"admin:s3cret").decode()}
        wrong = {"Authorization": "Basic " + base64.b64encode(b"admin:nope").decode()}
        assert client.get("/drover/", headers=wrong).status_code == 401
        page = client.get("/drover/jobs", headers={**login, "Host": "app.example"})
        assert page.status_code == 200
        assert f'href="/drover/jobs/{dead}"' in page.text
        cookie = client.get_cookie("drover_csrf", domain="app.example", path="/drover")
        assert cookie is not None
        done = client.post(
            f"/drover/jobs/{dead}/retry",
            data={"csrf": cookie.value, "next": "/drover/jobs"},
            headers={**login, "Host": "app.example", "Origin": "http://app.example"},
        )
        assert done.status_code == 303 and done.headers["Location"].startswith("/drover/jobs?")
        assert conn.execute(
            "SELECT state::text FROM drover_jobs WHERE id = %s", (dead,)
        ).fetchone() == ("available",)
    finally:
        inspector = app.extensions["drover_inspector"]
        assert isinstance(inspector, drover.Inspector)
        inspector.close()


_DJANGO = """
import json, sys
sys.path.insert(0, sys.argv[1])
import django_mount
application = django_mount.application_for(sys.argv[2])
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth.models import User
from django.test import Client as DjangoClient
from werkzeug.test import Client

def session_of(user):
    browser = DjangoClient()
    browser.force_login(user)
    return browser.cookies["sessionid"].value

staff = User.objects.create_user("ops", is_staff=True)
visitor = User.objects.create_user("visitor")
client = Client(application)
results = {"anonymous": client.get("/drover/").status_code}
client.set_cookie("sessionid", session_of(visitor), domain="localhost")
results["not_staff"] = client.get("/drover/").status_code
client.set_cookie("sessionid", session_of(staff), domain="localhost")
page = client.get("/drover/jobs")
results["staff"] = page.status_code
results["links_under_mount"] = "/drover/jobs/" in page.get_data(as_text=True)
results["outside_mount"] = client.get("/elsewhere").status_code
print(json.dumps(results))
"""


def test_django_mount_serves_the_page_to_staff_only(db_url: str, conn: Conn) -> None:
    _dead(conn)
    # Django's settings are process-wide: the project runs in its own interpreter.
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run(
        [sys.executable, "-c", _DJANGO, str(EXAMPLES), db_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert results == {
        "anonymous": 403,
        "not_staff": 403,
        "staff": 200,
        "links_under_mount": True,
        "outside_mount": 404,
    }
