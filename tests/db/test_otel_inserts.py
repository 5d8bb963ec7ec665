"""Every insert path stores the trace context when tracing is on, and nothing when it is off.

``TracingMiddleware`` in ``Config.middleware`` makes a ``Client`` (and an
``AsyncClient``) open a span per insert call and store its W3C context in
each new job's ``meta`` (ADR 0042). The rows are read back from the real
database; the spans from an in-memory exporter of the test's own provider.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import psycopg
import pytest
from jobdb import Conn, MakeClient
from opentelemetry.trace import NoOpTracerProvider, SpanKind, StatusCode
from otel_support import Spans, stored_meta, trace_id_of

import drover
from drover.contrib.otel import DROVER_JOB_DUPLICATE, TracingMiddleware

T = TypeVar("T")


class Mail(drover.JobArgs, kind="otel_mail"):
    to: str = "a@example.com"


class Other(drover.JobArgs, kind="otel_other", queue="other"):
    n: int = 0


def _traced(make_client: MakeClient, spans: Spans) -> drover.Client:
    return make_client(middleware=[TracingMiddleware(spans.provider)])


def _trace_id_stored(conn: Conn, job_id: int) -> int:
    traceparent = stored_meta(conn, job_id)["traceparent"]
    version, trace_id, span_id, flags = traceparent.split("-")
    assert (version, len(span_id)) == ("00", 16)
    assert int(flags, 16) & 1  # sampled
    return int(trace_id, 16)


def _run(factory: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await factory()

    return asyncio.run(main())


# --- the client's paths -------------------------------------------------------------------------


def test_insert_stores_the_insert_spans_context_next_to_the_callers_metadata(
    make_client: MakeClient, conn: Conn
) -> None:
    spans = Spans()
    client = _traced(make_client, spans)
    with spans.tracer.start_as_current_span("request") as request:
        row = client.insert(Mail(), drover.InsertOpts(meta={"customer": 7}, tags=["t"]))
    (insert,) = spans.producers()
    meta = stored_meta(conn, row.id)
    assert meta["customer"] == 7
    assert _trace_id_stored(conn, row.id) == request.get_span_context().trace_id
    # The stored parent is the insert span, not the caller's.
    assert meta["traceparent"].split("-")[2] == f"{insert.get_span_context().span_id:016x}"  # type: ignore[union-attr]
    assert "tracestate" not in meta  # the caller's context had none


def test_a_tracestate_is_stored_with_the_traceparent(make_client: MakeClient, conn: Conn) -> None:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    spans = Spans()
    client = _traced(make_client, spans)
    remote = SpanContext(
        trace_id=0x1234,
        span_id=0x5678,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "value")]),
    )
    with trace.use_span(NonRecordingSpan(remote)):
        row = client.insert(Mail())
    meta = stored_meta(conn, row.id)
    assert meta["tracestate"] == "vendor=value"
    assert _trace_id_stored(conn, row.id) == 0x1234


def test_a_traceparent_given_in_the_metadata_wins(make_client: MakeClient, conn: Conn) -> None:
    spans = Spans()
    client = _traced(make_client, spans)
    given = "00-0000000000000000000000000000abcd-00000000000000ef-01"
    row = client.insert(Mail(), drover.InsertOpts(meta={"traceparent": given}))
    assert stored_meta(conn, row.id)["traceparent"] == given


def test_concurrent_inserts_each_store_their_own_context(
    make_client: MakeClient, conn: Conn
) -> None:
    # Calls arriving together are combined into one statement (the Combiner):
    # each job keeps the context of its own call.
    spans = Spans()
    client = _traced(make_client, spans)
    found: dict[int, int] = {}

    def one(n: int) -> None:
        with spans.tracer.start_as_current_span(f"request {n}") as request:
            found[client.insert(Mail()).id] = request.get_span_context().trace_id

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(32)))
    assert len(found) == 32
    for job_id, trace_id in found.items():
        assert _trace_id_stored(conn, job_id) == trace_id


def test_insert_tx_and_insert_many_tx_store_it_in_the_callers_transaction(
    make_client: MakeClient, conn: Conn, db_url: str
) -> None:
    spans = Spans()
    client = _traced(make_client, spans)
    with psycopg.connect(db_url) as app, spans.tracer.start_as_current_span("request") as request:
        one = client.insert_tx(app, Mail())
        many = client.insert_many_tx(app, [Mail(), (Other(), drover.InsertOpts(priority=2))])
        app.commit()
    trace_id = request.get_span_context().trace_id
    for row in [one, *many]:
        assert _trace_id_stored(conn, row.id) == trace_id
    assert sorted(s.name for s in spans.producers()) == ["insert_many_tx", "insert_tx default"]
    batch = next(s for s in spans.producers() if s.name == "insert_many_tx")
    assert batch.attributes is not None
    assert batch.attributes["messaging.batch.message_count"] == 2
    assert "messaging.destination.name" not in batch.attributes  # two queues


@pytest.mark.parametrize(
    "opts",
    [
        None,
        drover.InsertOpts(priority=3),
        drover.InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(hours=1)),
        drover.InsertOpts(tags=["x"]),
        drover.InsertOpts(meta={"a": 1}),
        drover.InsertOpts(unique_key="k"),
        drover.InsertOpts(unique=drover.Unique(by_args=True)),
    ],
    ids=["uniform", "direct", "direct-timed", "tags", "meta", "unique-key", "identity"],
)
def test_insert_many_stores_it_in_every_job_of_each_copy_path(
    opts: drover.InsertOpts | None, make_client: MakeClient, conn: Conn
) -> None:
    spans = Spans()
    client = _traced(make_client, spans)
    items: list[drover.InsertItem] = [Mail(to=f"{n}@example.com") for n in range(3)]
    if opts is not None:
        items.append((Mail(to="last@example.com"), opts))
    with spans.tracer.start_as_current_span("request") as request:
        rows = client.insert_many(items)
    assert len(rows) == len(items)
    for row in rows:
        assert _trace_id_stored(conn, row.id) == request.get_span_context().trace_id
        # The returned rows hold what was stored, without reading it back.
        assert dict(row.meta) == stored_meta(conn, row.id)


def test_a_workflow_and_a_dependent_insert_store_it_in_each_job(
    make_client: MakeClient, conn: Conn
) -> None:
    spans = Spans()
    client = _traced(make_client, spans)
    with spans.tracer.start_as_current_span("request") as request:
        flow = client.insert(drover.chain(Mail(), drover.group(Mail(), Other())))
        after = client.insert(Mail(), drover.InsertOpts(depends_on=[flow.jobs[0]]))
    trace_id = request.get_span_context().trace_id
    for row in [*flow.jobs, after]:
        assert _trace_id_stored(conn, row.id) == trace_id
    workflow_span = spans.producers()[0]
    assert workflow_span.attributes is not None
    assert workflow_span.attributes["messaging.batch.message_count"] == 3


def test_a_unique_insert_returning_the_holder_keeps_the_holders_context(
    make_client: MakeClient, conn: Conn
) -> None:
    spans = Spans()
    client = _traced(make_client, spans)
    opts = drover.InsertOpts(unique=drover.Unique())
    with spans.tracer.start_as_current_span("first") as first:
        held = client.insert(Mail(), opts)
    with spans.tracer.start_as_current_span("second"):
        again = client.insert(Mail(), opts)
    assert again.duplicate and again.id == held.id
    assert _trace_id_stored(conn, held.id) == first.get_span_context().trace_id
    second_insert = spans.producers()[-1]
    assert second_insert.attributes is not None
    assert second_insert.attributes[DROVER_JOB_DUPLICATE] is True


def test_a_refused_insert_is_recorded_on_its_span(make_client: MakeClient) -> None:
    spans = Spans()
    client = _traced(make_client, spans)
    client.insert(Mail(), drover.InsertOpts(unique_key="k"))
    with pytest.raises(drover.DuplicateJob):
        client.insert(Mail(), drover.InsertOpts(unique_key="k"))
    refused = spans.producers()[-1]
    assert refused.status.status_code is StatusCode.ERROR
    assert refused.attributes is not None
    assert refused.attributes["error.type"] == "DuplicateJob"
    assert [e.name for e in refused.events] == ["exception"]


# --- nothing stored without tracing ------------------------------------------------------------


def test_without_tracing_nothing_is_stored_even_inside_a_span(
    make_client: MakeClient, conn: Conn
) -> None:
    spans = Spans()
    client = make_client()
    with spans.tracer.start_as_current_span("request"):
        rows = [
            client.insert(Mail()),
            *client.insert_many([Mail(), Mail()]),
            client.insert(Mail(), drover.InsertOpts(meta={"a": 1})),
        ]
    assert [stored_meta(conn, r.id) for r in rows] == [{}, {}, {}, {"a": 1}]
    assert [s.name for s in spans.finished()] == ["request"]


def test_with_no_sdk_the_middleware_stores_nothing(make_client: MakeClient, conn: Conn) -> None:
    client = make_client(middleware=[TracingMiddleware(NoOpTracerProvider())])
    rows = [client.insert(Mail()), *client.insert_many([Mail(), Mail()])]
    assert [stored_meta(conn, r.id) for r in rows] == [{}, {}, {}]


def test_a_tracer_provider_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(drover.InvalidArgument, match="tracer_provider must be"):
        TracingMiddleware("provider")  # type: ignore[arg-type]


# --- AsyncClient ---------------------------------------------------------------------------------


def test_the_async_clients_inserts_store_it(db_url: str, conn: Conn) -> None:
    spans = Spans()
    config = drover.Config(middleware=[TracingMiddleware(spans.provider)])

    async def main() -> tuple[list[drover.JobRow], int]:
        async with drover.AsyncClient(db_url, config) as client:
            with spans.tracer.start_as_current_span("request") as request:
                rows = [await client.insert(Mail()), *await client.insert_many([Mail(), Other()])]
                rows += await client.insert_many([Mail(), Mail()])
                async with await psycopg.AsyncConnection.connect(db_url) as app:
                    rows.append(await client.insert_tx(app, Mail()))
                    rows += await client.insert_many_tx(app, [Mail()])
                    await app.commit()
        return rows, request.get_span_context().trace_id

    rows, trace_id = _run(main)
    assert len(rows) == 7
    for row in rows:
        assert _trace_id_stored(conn, row.id) == trace_id
        assert dict(row.meta) == stored_meta(conn, row.id)
    assert sorted(s.name for s in spans.producers()) == [
        "insert default",
        "insert_many",
        "insert_many default",
        "insert_many_tx default",
        "insert_tx default",
    ]
    assert all(s.kind is SpanKind.PRODUCER for s in spans.producers())
    assert {trace_id_of(s) for s in spans.producers()} == {trace_id}


# --- without opentelemetry ------------------------------------------------------------------------

_HIDDEN = textwrap.dedent(
    """
    import sys

    class Hide:
        # Makes every opentelemetry import fail, as if it were not installed.
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, Hide())

    import drover, drover.testing, drover.cli, drover.web

    class Mail(drover.JobArgs, kind="hidden_mail"):
        to: str = "a"

    workers = drover.Workers()
    done = []

    @workers.register
    def work(job: drover.Job[Mail]) -> None:
        done.append(job.id)

    client = drover.Client(sys.argv[1], drover.Config(workers=workers))
    with drover.testing.inline(client) as jobs:
        row = client.insert(Mail())
        client.insert_many([Mail(), Mail()])
        jobs.drain()
    client.close()
    assert len(done) == 3 and row.id in done, done
    assert not [m for m in sys.modules if m.startswith("opentelemetry")]
    try:
        import drover.contrib.otel
    except ImportError as exc:
        print("refused:", exc)
    """
)


def test_drover_imports_and_runs_jobs_without_opentelemetry(db_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _HIDDEN, db_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "refused: drover.contrib.otel needs OpenTelemetry: pip install 'drover-queue[otel]'" in (
        done.stdout
    )


def test_a_traced_batch_without_metadata_keeps_the_direct_copy(
    make_client: MakeClient, conn: Conn, db_url: str
) -> None:
    # The staging COPY creates a temporary table in the session it runs on;
    # the direct COPY creates none, traced or not.
    spans = Spans()
    client = _traced(make_client, spans)
    with psycopg.connect(db_url) as app, spans.tracer.start_as_current_span("request"):
        uniform = client.insert_many_tx(app, [Mail(), Mail()])
        mixed = client.insert_many_tx(app, [Mail(), (Other(), drover.InsertOpts(priority=1))])
        staged = app.execute("SELECT to_regclass('pg_temp.drover_insert_batch')").fetchone()
        app.commit()
    assert staged == (None,)
    for row in [*uniform, *mixed]:
        assert "traceparent" in stored_meta(conn, row.id)
