"""Upgrades under load: the previous release's workers keep working while ``drover migrate`` runs.

The policy (ADR 0038, docs/upgrading.md): a release's migrations keep the
previous release's code working, so an upgrade is "migrate while the old
workers run, then roll the workers". These tests hold the shipped migrations
to it with the previous release itself: its ``src`` and ``sql`` taken from git
(``previous_release.py`` says which commit, and why not simply the parent of
the newest migration's commit), imported by real processes through
``PYTHONPATH``, on this environment's dependencies.

Without git history (an sdist, a shallow clone) they skip and say so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import previous_release
import psycopg
import pytest
from jobdb import Conn
from previous_release import NoHistory, PreviousRelease, extract, find_previous_release
from upgrade_fleet import Plain, create_side_tables

import drover

FLEET = Path(__file__).with_name("upgrade_fleet.py")

SAFETY = 60.0
"""Longest any process or condition is waited for (a failing test never hangs)."""

BACKLOG = 50_000
"""Finished jobs already in the table, so the migrations' index builds read something."""


class Previous:
    """The previous release, unpacked: its commit and migrations, and the ``src`` to import."""

    def __init__(self, release: PreviousRelease, src: Path) -> None:
        self.release = release
        self.src = src

    def env(self) -> dict[str, str]:
        """An environment whose ``import drover`` finds the previous release first."""
        return {**os.environ, "PYTHONPATH": str(self.src), "PYTHONFAULTHANDLER": "1"}


def current_env() -> dict[str, str]:
    """An environment whose ``import drover`` finds today's (this checkout's)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONFAULTHANDLER": "1"}


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Previous:
    """The previous release's drover, unpacked; skips the module without git history."""
    try:
        release = find_previous_release()
    except NoHistory as exc:
        pytest.skip(f"no previous release to upgrade from: {exc}")
    src = extract(release.commit, tmp_path_factory.mktemp("previous"))
    found = subprocess.run(
        [sys.executable, "-c", "import drover; print(drover.__file__)"],
        env=Previous(release, src).env(),
        capture_output=True,
        text=True,
        timeout=SAFETY,
        check=False,
    )
    assert found.returncode == 0, (
        f"the previous release ({release.commit[:12]}) does not import with this "
        f"environment's dependencies:\n{found.stderr}"
    )
    assert Path(found.stdout.strip()).is_relative_to(src), found.stdout
    return Previous(release, src)


def _schema_version(conn: Conn) -> int:
    row = conn.execute("SELECT max(version) FROM drover_schema_version").fetchone()
    assert row is not None
    return int(row[0])


def _old_migrate(previous: Previous, url: str) -> None:
    """The previous release's own ``drover.migrate`` brings a fresh database to its version."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, drover; drover.migrate(sys.argv[1])", url],
        env=previous.env(),
        capture_output=True,
        text=True,
        timeout=SAFETY,
        check=False,
    )
    assert done.returncode == 0, done.stderr


class Fleet:
    """Worker and producer processes on one database; leaving the block kills any still running."""

    def __init__(self, url: str, tmp: Path) -> None:
        self._url = url
        self._tmp = tmp
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self._stopped: set[str] = set()

    def spawn(self, name: str, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
        with (self._tmp / f"{name}.stderr").open("w") as err:
            proc = subprocess.Popen(
                [sys.executable, str(FLEET), *args],
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                text=True,
            )
        self.procs[name] = proc
        return proc

    def worker(self, name: str, env: dict[str, str]) -> subprocess.Popen[str]:
        return self.spawn(name, env, "work", self._url, name)

    def stderr(self, name: str) -> str:
        return (self._tmp / f"{name}.stderr").read_text()

    def diagnostics(self) -> str:
        return "\n".join(f"--- {n}\n{self.stderr(n)[-3000:]}" for n in self.procs)

    def stop(self, name: str) -> str:
        """SIGTERM one process; it must exit 0 with nothing on stderr. Returns its stdout."""
        proc = self.procs[name]
        self._stopped.add(name)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=SAFETY)
        assert proc.returncode == 0, self.diagnostics()
        assert self.stderr(name) == "", f"{name} logged:\n{self.stderr(name)}"
        return out

    def trouble(self) -> str | None:
        """What went wrong so far: a process that logged or exited on its own, else None."""
        for name, proc in self.procs.items():
            if self.stderr(name) or (proc.poll() is not None and name not in self._stopped):
                return f"{name} exited with {proc.poll()} or logged:\n{self.diagnostics()}"
        return None

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=SAFETY)


def _wait(
    conn: Conn,
    sql: str,
    params: tuple[object, ...],
    want: int,
    what: str,
    fleet: Fleet | None = None,
) -> None:
    """Until ``sql`` counts ``want``; fails at once if a process of ``fleet`` logs or dies."""
    deadline = time.monotonic() + SAFETY
    while True:
        row = conn.execute(sql, params).fetchone()
        got = int(row[0]) if row is not None and row[0] is not None else 0
        if got >= want:
            return
        trouble = fleet.trouble() if fleet is not None else None
        if trouble is not None:
            pytest.fail(f"{what}: {got} of {want}; {trouble}")
        if time.monotonic() >= deadline:
            pytest.fail(f"{what}: {got} of {want} within {SAFETY}s")
        time.sleep(0.05)


def _ready(conn: Conn, name: str, fleet: Fleet) -> None:
    sql = "SELECT count(*) FROM upgrade_ready WHERE release = %s"
    _wait(conn, sql, (name,), 1, f"{name} ready", fleet)


def _now(conn: Conn) -> object:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


@pytest.mark.slow
def test_old_workers_drain_while_current_migrate_runs(
    previous: Previous, empty_db_url: str, tmp_path: Path
) -> None:
    url = empty_db_url
    _old_migrate(previous, url)
    with psycopg.connect(url, autocommit=True) as conn:
        assert _schema_version(conn) == previous.release.version
        # Finished jobs the migrations' index builds and checks read.
        conn.execute(
            "INSERT INTO drover_jobs (kind, args, state, finalized_at) "
            "SELECT 'backlog', jsonb_build_object('n', g), 'completed', now() "
            "FROM generate_series(1, %s) g",
            (BACKLOG,),
        )
        create_side_tables(url)
        with Fleet(url, tmp_path) as fleet:
            for name in ("old-1", "old-2"):
                fleet.worker(name, previous.env())
            for name in ("old-1", "old-2"):
                _ready(conn, name, fleet)
            fleet.spawn("old-producer", previous.env(), "produce", url, "--rate", "200")
            sql = "SELECT count(*) FROM upgrade_log"
            _wait(conn, sql, (), 100, "jobs run before migrating", fleet)

            # Today's `drover migrate`, on the database the old fleet is using.
            started = _now(conn)
            t0 = time.perf_counter()
            migrated = subprocess.run(
                [sys.executable, "-m", "drover", "--database", url, "migrate"],
                env=current_env(),
                capture_output=True,
                text=True,
                timeout=SAFETY,
                check=False,
            )
            seconds = time.perf_counter() - t0
            ended = _now(conn)
            assert migrated.returncode == 0, migrated.stderr
            assert _schema_version(conn) == int(previous.release.current[-1][:4])

            # The old workers keep going on the new schema, and an old worker
            # started now (a restart, a scale-up) starts on it.
            fleet.worker("old-3", previous.env())
            _ready(conn, "old-3", fleet)
            _wait(
                conn,
                "SELECT count(*) FROM upgrade_log WHERE at > %s AND release LIKE 'old-%%'",
                (ended,),
                200,
                "jobs the old workers ran after the migration",
                fleet,
            )
            _wait(
                conn,
                "SELECT count(*) FROM upgrade_log WHERE release = 'old-3'",
                (),
                10,
                "jobs the old worker started after the migration ran",
                fleet,
            )
            out = fleet.stop("old-producer")
            assert str(previous.src) in out  # it ran the previous release
            produced = int(out.split()[-1])

            # Roll the workers: the old ones drain and exit, a current one takes over.
            for name in ("old-1", "old-2", "old-3"):
                assert str(previous.src) in fleet.stop(name)
            fleet.worker("current", current_env())
            _ready(conn, "current", fleet)
            client = drover.Client(url)
            try:
                client.insert_many([Plain(n=i) for i in range(200)])
            finally:
                client.close()
            _wait(
                conn,
                "SELECT count(*) FROM drover_jobs WHERE kind LIKE 'upgrade\\_%%' "
                "AND state = 'completed'",
                (),
                produced + 200,
                "jobs completed",
                fleet,
            )
            assert str(previous.src) not in fleet.stop("current")

        states = conn.execute(
            "SELECT state::text, count(*) FROM drover_jobs WHERE kind <> 'backlog' GROUP BY 1"
        ).fetchall()
        assert dict(states) == {"completed": produced + 200}
        # Exactly once: one execution per job, or a re-run the job's own errors
        # attribute (an attempt after a failed or expired one).
        reruns = conn.execute(
            "SELECT l.job_id, count(*), j.attempt, jsonb_array_length(j.errors) "
            "FROM upgrade_log l JOIN drover_jobs j ON j.id = l.job_id "
            "GROUP BY l.job_id, j.attempt, j.errors HAVING count(*) <> 1"
        ).fetchall()
        unattributed = [r for r in reruns if r[1] != r[2] or r[3] != r[2] - 1]
        assert unattributed == [], unattributed
        never = conn.execute(
            "SELECT count(*) FROM drover_jobs j WHERE j.kind LIKE 'upgrade\\_%%' "
            "AND NOT EXISTS (SELECT 1 FROM upgrade_log l WHERE l.job_id = j.id)"
        ).fetchone()
        assert never == (0,)
        during = conn.execute(
            "SELECT count(*) FROM upgrade_log WHERE at BETWEEN %s AND %s", (started, ended)
        ).fetchone()
        by_release = conn.execute(
            "SELECT split_part(release, '-', 1), count(*) FROM upgrade_log GROUP BY 1 ORDER BY 1"
        ).fetchall()
        gap = conn.execute(
            "SELECT max(d) FROM (SELECT at - lag(at) OVER (ORDER BY at) AS d FROM upgrade_log "
            "WHERE at BETWEEN %s::timestamptz - interval '2 s' AND %s::timestamptz + interval '2 s'"
            ") x",
            (started, ended),
        ).fetchone()
        # From the first new migration's BEGIN (its applied_at is that
        # transaction's now()) to the command's exit: the schema work, without
        # the interpreter's start-up that the wall time includes.
        work = conn.execute(
            "SELECT %s::timestamptz - min(applied_at) FROM drover_schema_version "
            "WHERE version > %s",
            (ended, previous.release.version),
        ).fetchone()
    assert during is not None and gap is not None and work is not None
    # The figures docs/reliability.md quotes ("Upgrades under load"); -s shows them.
    print(
        f"\nupgrade from {previous.release.commit[:12]} (schema {previous.release.version}) "
        f"applying {', '.join(previous.release.newer)}: migrate {seconds:.2f} s wall "
        f"({work[0].total_seconds() * 1000:.0f} ms from the first migration's BEGIN), "
        f"{during[0]} jobs run during it, longest pause between executions around it "
        f"{gap[0].total_seconds() * 1000:.0f} ms; jobs {produced} old-produced + 200 current, "
        f"executions by release {dict(by_release)}, reruns {len(reruns)}, errors 0"
    )


def test_current_worker_refuses_the_previous_release_schema(
    previous: Previous, empty_db_url: str
) -> None:
    _old_migrate(previous, empty_db_url)
    newest = int(previous.release.current[-1][:4])
    client = drover.Client(empty_db_url, drover.Config(workers=_one_worker()))
    try:
        with pytest.raises(drover.SchemaMissing) as raised:
            client.start()
    finally:
        client.close()
    message = str(raised.value)
    assert f"at version {previous.release.version} " in message
    assert f"needs {newest}" in message
    assert "drover migrate" in message
    with psycopg.connect(empty_db_url) as conn:
        assert _schema_version(conn) == previous.release.version  # refused, changed nothing


def _one_worker() -> drover.Workers:
    workers = drover.Workers()

    def plain(job: drover.Job[Plain]) -> None:
        pass

    workers.register(plain)
    return workers


def test_previous_release_worker_starts_on_the_current_schema(
    previous: Previous, db_url: str, tmp_path: Path
) -> None:
    create_side_tables(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn, Fleet(db_url, tmp_path) as fleet:
        fleet.worker("old", previous.env())
        _ready(conn, "old", fleet)
        client = drover.Client(db_url)
        try:
            job = client.insert(Plain(n=1))
        finally:
            client.close()
        _wait(
            conn,
            "SELECT count(*) FROM drover_jobs WHERE id = %s AND state = 'completed'",
            (job.id,),
            1,
            "the job today's client inserted, run by the old worker",
        )
        out = fleet.stop("old")
    assert str(previous.src) in out


def test_without_a_git_checkout_the_previous_release_is_not_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An installed sdist: sql/migrations without .git around it.
    (tmp_path / "sql" / "migrations").mkdir(parents=True)
    monkeypatch.setattr(previous_release, "ROOT", tmp_path)
    with pytest.raises(NoHistory, match="not a git checkout"):
        find_previous_release()


def test_a_shallow_clone_says_it_is_shallow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "--quiet", "--depth", "1", f"file://{previous_release.ROOT}", str(clone)],
        check=True,
        capture_output=True,
        timeout=SAFETY,
    )
    monkeypatch.setattr(previous_release, "ROOT", clone)
    with pytest.raises(NoHistory, match="shallow"):
        find_previous_release()
