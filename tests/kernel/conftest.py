"""The kernel conformance suite: every test here runs against both stores (ADR 0051).

``kernel_store`` is parametrised over ``memory`` (``MemoryStore`` on a
``ManualClock``) and ``postgres`` (``PgKernelStore`` on a fresh migrated
database); ``backend`` is the same store with the test's hands on it (the
store's clock, pausing a queue, hidden columns, a caller's transaction: see
``backends.py``). A test that takes either runs twice, once per store, and
must pass on both: where PostgreSQL behaves differently in a way that
matters, the in-memory store is wrong.

Engine-level tests (the kernel's fetcher, executor, completer, heartbeat,
rescuer and shutdown drain against either store) take the same fixture:
build the kernel's engine on ``kernel_store`` (or ``backend.store``) instead
of on a ``drover._db.store.Store``, start it, and wait on its rows with
``poll`` or events. Time: on PostgreSQL it passes by itself, so use leases
of a fraction of a second; on the memory store ``backend.pass_time(instant)``
moves the store's clock (leases and dueness), while the engine's own local
deadlines stay on ``time.monotonic()``, so a test of the engine's local
lease deadline waits for real on both. Put such tests in ``tests/kernel/``
with a name saying so (``test_engine_*.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drover._kernel.store import KernelStore

from .backends import Backend, MemoryBackend, PgBackend


@pytest.fixture(params=["memory", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A store under test, once per store; closed (transactions, pool) at the test's end."""
    made: MemoryBackend | PgBackend
    if request.param == "memory":
        made = MemoryBackend()
    else:
        made = PgBackend(request.getfixturevalue("db_url"))
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def kernel_store(backend: Backend) -> KernelStore:
    """The ``KernelStore`` under test: ``MemoryStore``, then ``PgKernelStore``."""
    return backend.store
