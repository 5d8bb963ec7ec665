"""socket_deadline: a client-side deadline that frees a call stuck on a half-open connection."""

from __future__ import annotations

import time

import psycopg
import pytest

from drover._db.deadline import socket_deadline
from drover.faults.harness.proxy import Mode, TcpProxy, proxy_target


def test_a_call_on_a_half_open_connection_fails_at_the_deadline_and_the_connection_is_closed(
    db_url: str,
) -> None:
    with TcpProxy(proxy_target(db_url)) as proxy, psycopg.connect(proxy.via(db_url)) as conn:
        conn.execute("SELECT 1")
        proxy.set_mode(Mode.BLACKHOLE)  # bytes acknowledged and dropped: the call never returns
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError), socket_deadline(conn, 0.3):
            conn.execute("SELECT 1")
        took = time.monotonic() - started
        assert 0.25 <= took < 20.0, took  # without the deadline: never
        assert conn.closed  # a pool would discard it, never lend it out again


def test_a_call_that_finishes_in_time_leaves_the_connection_usable(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        with socket_deadline(conn, 5.0):
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert not conn.closed
        assert conn.execute("SELECT 2").fetchone() == (2,)
