"""The embedded server: where it lives, how it is tuned, and what a dead owner leaves behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
from conftest import poll

from drover._db import embedded


def _settings(url: str) -> tuple[str, str, str]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_setting('data_directory'), current_setting('fsync'),"
            " current_setting('full_page_writes')"
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def test_a_test_server_is_throwaway_and_in_memory_when_there_is_room() -> None:
    with embedded.embedded_postgres() as url:
        data, fsync, fpw = _settings(url)
        root = Path(data).parent
        assert (fsync, fpw) == ("off", "off")
        assert f"host={root}" in url
        if shutil.disk_usage(embedded._MEMORY_DIR).free >= embedded._MEMORY_ROOM:
            assert root.parent == embedded._MEMORY_DIR
    assert not root.exists(), "the server's directory outlived the context"


def test_a_benchmark_server_keeps_durability_and_lives_on_disk() -> None:
    with embedded.embedded_postgres(tune_for_tests=False) as url:
        data, fsync, fpw = _settings(url)
        assert (fsync, fpw) == ("on", "on")
        assert Path(data).parent.parent != embedded._MEMORY_DIR


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    return child.pid


def test_directories_of_dead_owners_are_removed_and_others_left_alone(tmp_path: Path) -> None:
    bin_dir = embedded._bin_dir()
    dead = tmp_path / "drover-pg-dead"
    live = tmp_path / "drover-pg-live"
    unowned = tmp_path / "drover-pg-unowned"
    foreign = tmp_path / "someone-else"
    for folder, owner in ((dead, _dead_pid()), (live, os.getpid()), (foreign, _dead_pid())):
        (folder / "pgdata").mkdir(parents=True)
        (folder / "owner.pid").write_text(str(owner))
    unowned.mkdir()
    embedded._reap_orphans(tmp_path, bin_dir)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "drover-pg-live",
        "drover-pg-unowned",
        "someone-else",
    ]


def test_a_server_left_running_by_a_dead_owner_is_stopped(tmp_path: Path) -> None:
    # A process that starts a server and dies without leaving the context (SIGKILL).
    script = (
        "import os, sys\n"
        "from drover._db import embedded\n"
        "embedded._MEMORY_DIR = embedded.Path(sys.argv[1])\n"
        "embedded._MEMORY_ROOM = 0\n"
        "with embedded.embedded_postgres() as url:\n"
        "    print(url, flush=True)\n"
        "    os._exit(0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    url = done.stdout.strip()
    [root] = tmp_path.glob("drover-pg-*")
    assert _settings(url)[1] == "off", "the orphan is running"
    postmaster = int((root / "pgdata" / "postmaster.pid").read_text().split()[0])
    embedded._reap_orphans(tmp_path, embedded._bin_dir())
    assert not root.exists()
    poll(lambda: not _running(postmaster), message="the orphaned server stopped")


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet has stopped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
