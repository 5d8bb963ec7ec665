"""The stores the kernel's conformance suite runs on (ADR 0051): PostgreSQL's, for now."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drover._db.store import Store
from drover._kernel.store import KernelStore


@pytest.fixture(params=["postgres"])
def kernel_store(request: pytest.FixtureRequest, db_url: str) -> Iterator[KernelStore]:
    store = Store.open(db_url, who="test", max_size=6)
    try:
        yield store.kernel
    finally:
        store.close()
