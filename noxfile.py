"""Developer and CI sessions: ``nox -s lint typecheck tests build``."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["lint", "typecheck", "tests", "build", "docs"]
nox.options.error_on_missing_interpreters = False

# Python 3.11 is the floor; newer interpreters run where the machine has them.
PYTHONS = [v for v in ("3.11", "3.12", "3.13") if shutil.which(f"python{v}")] or ["3.11"]


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """The test suite against an installed (non-editable) drover."""
    session.install(".[dev]")
    session.run("pytest", *session.posargs)


@nox.session(python="3.12")
@nox.parametrize("django", ["5.2", "6"])
def django(session: nox.Session, django: str) -> None:
    """drover.contrib.django on Django 5.2 LTS and 6.x (django.tasks needs 6.0 and Python 3.12).

    test_django.py includes `manage.py makemigrations --check --dry-run` on the
    example project, so a model that drifts from its migration fails on either version.
    """
    session.install("-e", ".[dev]", f"django~={django}.0")
    session.run(
        "pytest", "-p", "no:cacheprovider", "tests/contrib/test_django.py",
        "tests/contrib/test_django_tasks.py", *session.posargs,
    )  # fmt: skip


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python="3.11")
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package, the tests (tests/typing is the typed API contract),
    drover's own fault suite and soak (faults/) and the developer tools (tools/)."""
    session.install("-e", ".[dev]")
    session.run("mypy", "--strict", "src", "tests", "faults", "tools")


@nox.session(python="3.11")
def docs(session: nox.Session) -> None:
    """The documentation site, built with --strict (a broken link or reference fails it)."""
    session.install("-e", ".[docs,web,django,sqlalchemy,otel]")
    site = Path(session.create_tmp()) / "site"
    session.run("mkdocs", "build", "--strict", "--site-dir", str(site))
    # The reference renders docstrings as Markdown: no literal Sphinx roles, and
    # what Client and Inspector inherit (get_job, pause_queue, ...) is listed.
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    leftovers = [role for role in (":meth:", ":class:", ":func:", ":attr:") if role in reference]
    if leftovers:
        session.error(f"the API reference shows Sphinx roles verbatim: {leftovers}")
    for name in ("drover.Client.get_job", "drover.Inspector.pause_queue"):
        if f'id="{name}"' not in reference:
            session.error(f"the API reference lacks {name}")


@nox.session(python="3.11")
def build(session: nox.Session) -> None:
    """Build sdist and wheel (the wheel from the sdist); check what the wheel carries and not."""
    session.install("build", "twine")
    dist = Path(session.create_tmp()) / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", str(dist))
    wheels = list(dist.glob("drover_queue-*.whl"))
    if len(wheels) != 1:
        session.error(f"expected one wheel in {dist}, found {wheels}")
    # PyPI's own checks of the metadata and the rendered README.
    session.run("twine", "check", "--strict", *map(str, dist.iterdir()))
    names = zipfile.ZipFile(wheels[0]).namelist()
    needed = ["drover/py.typed"]
    needed += [f"drover/sql/migrations/{p.name}" for p in Path("sql/migrations").glob("*.sql")]
    needed += [f"drover/web/templates/{p.name}" for p in Path("src/drover/web/templates").glob("*")]
    needed += [f"drover/web/static/{p.name}" for p in Path("src/drover/web/static").glob("*")]
    needed += [
        "drover/contrib/django/migrations/0001_drover_schema.py",
        "drover/contrib/django/migrations/0002_task_results_follow_their_jobs.py",
    ]
    needed += [f"drover/sql/queries/{p.name}" for p in Path("sql/queries").glob("*.sql")]
    needed += ["drover/sql/roles.sql"]
    # drover faults --app: the harness and the app, nothing of drover's own suite.
    needed += [
        f"drover/faults/harness/{p.name}" for p in Path("src/drover/faults/harness").glob("*.py")
    ]
    needed += [f"drover/faults/app/{p.name}" for p in Path("src/drover/faults/app").glob("*.py")]
    missing = [n for n in needed if n not in names]
    if missing:
        session.error(f"the wheel is missing {missing}")
    # The library only (ADR 0049): drover's own fault suite and soak, the developer
    # tools and the generated sql/schema.sql stay in the repository and the sdist.
    unwanted = ("drover/faults/suite/", "drover/faults/soak/", "faults/", "tools/")
    extra = [n for n in names if n.startswith(unwanted) or n == "drover/sql/schema.sql"]
    if extra:
        session.error(f"the wheel carries what it must not: {extra}")
    # The installed wheel must read its SQL from the package, not from a checkout.
    session.install(str(wheels[0]))
    check = (
        "import drover._db.queries as q; root = str(q.sql_root()); "
        "assert 'site-packages' in root, root; "
        "assert q.load_migrations() and q.query('job_insert'); print(root)"
    )
    session.run("python", "-c", check, external=False)
    # `drover faults --app` needs nothing of the clone: -I keeps this directory
    # (and its faults/ and tools/) off the path.
    app = "import drover.faults.app, drover.faults.harness.fleet, drover.cli.faults"
    session.run("python", "-I", "-c", app, external=False)
    size = wheels[0].stat().st_size
    session.log(f"{wheels[0].name}: {len(names)} files, {size:,} bytes, SQL included and loadable")
