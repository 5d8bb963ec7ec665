"""The Client facade: inserts, queue switches, and the lifecycle of a running client.

The client validates input and configuration, builds its store (on its own
pool or the application's), the metrics and the middleware chain, and starts
and stops the engine and the ops server. It runs no SQL and no loops of its
own: database work goes through its ``Store`` (inserts through the
insert funnel, ``drover._insert.funnel``), background
work through ``drover._runtime``. The insert methods live in
``drover._client_inserts`` (a base class); reading a job and switching
queues are delegated to a ``drover._jobs_and_queues.JobsAndQueues`` the
client holds (the Inspector holds one too).
"""

from __future__ import annotations

import enum
import secrets
import signal
import threading
import warnings
from collections.abc import Callable, Collection
from types import FrameType, TracebackType
from typing import Any, Self, TypeVar, overload

from prometheus_client import CollectorRegistry
from psycopg_pool import ConnectionPool

from drover._client_inserts import ClientInserts
from drover._db.handback import HandBackHold
from drover._db.namespace import namespace_for
from drover._db.notify import kind_payload
from drover._db.store import Store
from drover._durations import Duration, to_seconds
from drover._insert.combiner import Combiner
from drover._jobs_and_queues import JobsAndQueues
from drover._runtime.awaiter import Awaiter, awaited, ended
from drover._runtime.cancels import HardCancel
from drover._runtime.chain import build_chains
from drover._runtime.engine import Engine
from drover._runtime.notifier import Notifier
from drover._runtime.starts import start_gate_of
from drover.config import Config, declared_limits, periodic_jobs_of
from drover.errors import (
    AlreadyStarted,
    ConfigError,
    DroverError,
    InvalidArgument,
    NotStarted,
)
from drover.insert_middleware import insert_chain
from drover.job import InsertItem, JobRow
from drover.middleware import execution_chain
from drover.ops.metrics import Metrics
from drover.ops.server import OpsServer
from drover.queues import QueueState

__all__ = ["Client", "InsertItem"]

T = TypeVar("T")

_NO_WORKERS = (
    "this client has no workers, so it cannot run jobs: a started client claims every job "
    "in its queues and, without a worker for its kind, would fail each one. Register "
    "your workers in a drover.Workers and build the client with "
    "drover.Client(url, drover.Config(workers=workers)); a client that only inserts "
    "is never started"
)


class _Phase(enum.Enum):
    NEW = "new"
    STARTED = "started"
    STOPPING = "stopping"
    STOPPED = "stopped"


class Client(ClientInserts):
    """drover's entry point: inserts jobs and, once started, runs them.

    ``pool_or_conninfo`` is either a ``psycopg_pool.ConnectionPool`` that the
    application owns (drover borrows connections and never closes it) or a
    conninfo string / URL, from which the client opens its own pool and closes
    it on ``stop`` or ``close``. ``config`` says how jobs run; a client
    that only inserts needs none. ``max_jobs``, if given, is the most jobs the
    client ever claims (``drover worker --max-jobs-per-child`` sets it): once
    it has claimed that many it claims no more, and runs until stopped.
    ``hard_cancel``, if given, receives operators' hard cancels of the jobs
    this client runs (``drover worker --processes N`` sets it to replace the
    process after the grace, ADR 0030); without it a hard cancel acts as a
    soft one.

    All methods are thread-safe. Each non-transactional insert borrows one pool
    connection: ``insert`` for one round trip (concurrent calls share one),
    ``insert_many`` for a handful whatever the batch's size. So a client can be
    shared by every thread of a web application. When no pool connection frees
    up within the pool's timeout, the call raises ``drover.DatabaseError``.

    Tracing: with a ``drover.contrib.otel.TracingMiddleware`` in
    ``config.middleware``, each insert method runs in a span of its own and
    stores that span's W3C trace context in each job's metadata
    (``traceparent``, ``tracestate``), on the calling thread; without one,
    nothing is stored (ADR 0042).

    Running jobs: ``start`` launches the job pool (``config.concurrency``
    threads) and the background services: the fetcher, the completer, the
    heartbeat and the rescuer, the listener (``config.notify``), the services
    of ``config.effective_plugins`` (the stats refresher, the pruner, the
    health probe, the periodic ticker and the application's own plugins,
    each when configured), and the ops server
    (``config.ops_addr``); the first insert starts the notifier
    (``config.notify``). ``stop`` drains them. A running job holds no
    database connection, so the pool needs only a handful of connections
    whatever the concurrency. The lifecycle runs once per client.
    """

    def __init__(
        self,
        pool_or_conninfo: ConnectionPool[Any] | str,
        config: Config | None = None,
        *,
        max_jobs: int | None = None,
        hard_cancel: Callable[[HardCancel], None] | None = None,
    ) -> None:
        if max_jobs is not None and (
            isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1
        ):
            raise InvalidArgument(f"max_jobs must be a positive int or None, not {max_jobs!r}")
        if config is None:
            config = Config()
        elif not isinstance(config, Config):
            raise InvalidArgument(
                f"config must be a drover.Config, not {type(config).__qualname__}"
            )
        # Composed once, before any connection is opened: a broken middleware
        # fails construction and later changes to its list change nothing.
        self._metrics = Metrics(
            config.metrics_registry or CollectorRegistry(),
            concurrency=config.concurrency,
            queues=list(config.queues),
            periodic_ids=[job.id for job in periodic_jobs_of(config)],
        )
        # Set when stop() begins: jobs waiting for their start under a rate
        # that counts starts go back to the queue at once (ADR 0052).
        self._stopping = threading.Event()
        # The async chain is None without async workers; ConfigError when a
        # middleware has no async form.
        self._chain, self._async_chain = build_chains(
            config.workers,
            execution_chain(config.middleware),
            config.logger,
            self._metrics.middleware,
            self._metrics.async_middleware,
            config.max_result_bytes,
            starts=start_gate_of(
                declared_limits(config),
                lambda job_id, attempt: self._store.take_start(job_id, attempt),
                self._stopping,
            ),
        )
        self._store = Store.open(
            pool_or_conninfo,
            who="Client",
            max_size=10,
            pgbouncer=config.pgbouncer,
            session_url=config.session_url,
            ns=namespace_for(config.schema),
        )
        self._config = config
        self._max_jobs = max_jobs
        self._hard_cancel = hard_cancel
        self._before_hand_back: Callable[[list[int]], None] | None = None
        self._id = secrets.token_hex(3)
        self._close_lock = threading.Lock()
        self._closed = False
        self._lifecycle = threading.Lock()
        self._phase = _Phase.NEW
        self._engine: Engine | None = None
        self._ops: OpsServer | None = None
        self._stopped = threading.Event()
        self._verdict: DroverError | None = None
        self._combiner = Combiner(self._store)
        # Job reads and queue switches, shared with the Inspector; a resume
        # wakes this client's fetcher.
        self._jobs = JobsAndQueues(self._store.operator, on_resume=self._nudge)
        # The insert middleware among Config.middleware (ADR 0047): empty
        # unless an entry has around_insert, and then the funnel costs nothing.
        self._insert_chain = insert_chain(config.middleware)
        # Wake-ups for the client's own inserts, sent after they commit.
        self._notifier = (
            Notifier(store=self._store, client_id=self._id, logger=config.logger)
            if config.notify
            else None
        )
        if self._notifier is not None:
            self._notifier.on_death = self._metrics.service_died
        # Client.result's LISTEN connection and thread: started by the first call.
        self._awaiter = Awaiter(self._store, client_id=self._id, logger=config.logger)

    @property
    def config(self) -> Config:
        """The validated configuration this client runs with."""
        return self._config

    @property
    def pool(self) -> ConnectionPool[Any]:
        """Deprecated: the connection pool the client uses (its own, or the one it was given).

        Warns (``DeprecationWarning``). An application that passes its own
        ``psycopg_pool.ConnectionPool`` to ``Client`` keeps its own reference
        to it (accepting a pool is not deprecated); a pool the client opened
        from a URL is the client's to manage, and its connections are not
        the application's to borrow.
        """
        warnings.warn(
            "Client.pool is deprecated: keep a reference to the psycopg_pool.ConnectionPool "
            "you pass to drover.Client; a pool the client opened from a URL is its own",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._store.pool

    def _target(self) -> str:
        """``host:port/dbname`` of the client's database (never the password), for messages."""
        return self._store.target

    def _derive(
        self,
        config: Config,
        *,
        max_jobs: int | None = None,
        hard_cancel: Callable[[HardCancel], None] | None = None,
    ) -> Client:
        """A new client on this client's connections with ``config`` (the CLI's overrides).

        The new client borrows this one's pool, never closes it, and must be
        closed before this one (which closes a pool it opened). For
        ``drover worker``'s option overrides and its supervised children;
        nothing outside drover's own surfaces calls it.
        """
        return Client(self._store.pool, config, max_jobs=max_jobs, hard_cancel=hard_cancel)

    def _hold_hand_backs(self) -> HandBackHold:
        """Keep the jobs this client's stop hands back from every other worker until the
        returned session ends (``drover worker``, which then ends its process: ADR 0053).

        Call before ``start``. Nothing outside drover's own surfaces calls it.
        """
        hold = self._store.hand_back_hold(self._config.logger)
        self._before_hand_back = hold
        return hold

    # --- reading a job, switching queues (delegated to JobsAndQueues) -----------------------

    def get_job(self, job_id: int) -> JobRow:
        """The job's current row, read now (a snapshot; it does not follow the job).

        Raises:
            drover.NotFound: no job has that id (it never existed, or retention
                deleted it).
            drover.InvalidArgument: ``job_id`` is not an int in 1..2**63-1.
            drover.DatabaseError: the database refused or could not be reached.
        """
        return self._jobs.get_job(job_id)

    def get_result(self, job_id: int) -> Any:
        """The result stored for the job, read now, without waiting (``None``: none yet).

        A job has a result once it completed and its handler returned
        something other than ``None`` (parsed JSON: a model comes back as a
        dict). To wait for a job's end, use ``Client.result``.

        Raises:
            drover.NotFound: no job has that id.
            drover.InvalidArgument: ``job_id`` is not an int in 1..2**63-1.
            drover.DatabaseError: the database refused or could not be reached.
        """
        return self._jobs.get_result(job_id)

    def pause_queue(self, name: str) -> QueueState:
        """Stop every client from claiming jobs from ``name``, until ``resume_queue``.

        Persisted in the database (``drover_queues``), so it applies to all
        clients on this database, including ones started later, from their next
        claim (within one poll interval). Jobs already running finish normally;
        inserts into a paused queue are accepted and wait. Idempotent: pausing
        a paused queue keeps its first ``paused_at``. Returns the queue's state.

        Raises:
            drover.InvalidInsertOpts: ``name`` is not a valid queue name.
        """
        return self._jobs.pause_queue(name)

    def resume_queue(self, name: str) -> bool:
        """Let clients claim from ``name`` again; False if it was not paused (a no-op).

        Listening clients (``Config.notify``) are woken at once by a
        notification on the queue; others pick the queue up within one poll
        interval. A started client's own fetcher is woken at once.

        Raises:
            drover.InvalidInsertOpts: ``name`` is not a valid queue name.
        """
        return self._jobs.resume_queue(name)

    def queue_states(self) -> list[QueueState]:
        """Every queue ever paused, by name; ``QueueState.paused`` tells whether it still is."""
        return self._jobs.queue_states()

    def _nudge(self) -> None:
        # A job this client inserted itself can be claimed without waiting out
        # the poll interval. Transactional inserts cannot nudge: the job is not
        # visible until the caller commits.
        engine = self._engine
        if engine is not None and self._phase is _Phase.STARTED:
            engine.wake()

    def _released(self, queues: Collection[str], kinds: Collection[str]) -> None:
        # Jobs a cluster-wide concurrency limit held have ended: wake the
        # fetchers of their queues, as an insert does, and of every client
        # working their kinds (a kind limit holds jobs back in any queue).
        # Sent after the outcomes committed, by the notifier.
        self._committed([*queues, *(kind_payload(k) for k in kinds)])

    # --- lifecycle --------------------------------------------------------------------------

    @overload
    def result(
        self, job: JobRow | int, *, timeout: Duration | None = None, as_type: None = None
    ) -> Any: ...
    @overload
    def result(
        self, job: JobRow | int, *, timeout: Duration | None = None, as_type: type[T]
    ) -> T: ...
    def result(
        self, job: JobRow | int, *, timeout: Duration | None = None, as_type: type[T] | None = None
    ) -> Any:
        """Wait until ``job`` (a row or an id) has ended; return its handler's result.

        The result is what the handler returned, as stored (JSON: a pydantic
        model comes back as a dict) or validated as ``as_type`` (a pydantic model
        or any type pydantic validates), ``None`` when the handler returned
        ``None``. Works on any client, started or not, for jobs run by any
        process.

        Waiting: the job is flagged as awaited and the write of its terminal
        state notifies this client (one shared LISTEN connection and thread
        per client, opened by the first call); the state is also re-read at
        least every second, so behind PgBouncer or when a notification is
        lost the call still returns, a second late at most. Any number of
        threads may wait at once. ``timeout`` (a ``timedelta`` or seconds,
        ``None`` for no limit) bounds the wait; the job is not changed when
        it runs out. A job run again later (an operator retry) gets a new
        result.

        Raises:
            drover.JobFailed: the job ended ``dead``; ``drover.JobCancelled``
                (a subclass) when it ended ``cancelled``. Both carry the last
                error message.
            drover.ResultTimeout: (also a ``TimeoutError``) still not ended
                when ``timeout`` passed.
            drover.NotFound: no such job (never inserted, or deleted by
                retention).
            drover.InvalidResult: the stored result does not validate as
                ``as_type``.
            drover.InvalidArgument: a bad ``job`` or ``timeout``;
                ``drover.DatabaseError`` when the database cannot be reached.
        """
        job_id, seconds = awaited(job, timeout)
        if self._closed:
            raise InvalidArgument("this client is closed; results need an open client")
        return ended(self._awaiter.wait(job_id, seconds), job_id, as_type)

    def start(self) -> None:
        """Start running jobs; returns as soon as the pool is running.

        First borrows one connection and reads the schema version and the
        role's privileges, so a wrong URL, a refused login, a database that
        was never migrated or a role that may not claim fails here, with its
        real cause, before any thread starts; the client then stays startable.

        A client whose ``config.workers`` registers no kind is refused before
        anything connects: it would claim jobs only to fail them.

        Raises:
            drover.AlreadyStarted: the client was started before (even if stopped since).
            drover.ConfigError: ``config.workers`` is empty (``Config(workers=...)``
                was not given); the client stays usable for inserts.
            drover.SchemaMissing: drover's tables are missing or older than
                this drover; run ``drover migrate``.
            drover.CannotClaim: the role the client connects as may not claim
                and run jobs (a producer's or a reader's); the message names
                what it lacks and the worker role to connect as instead.
            drover.DatabaseError: the database could not be reached or refused
                the connection (the message carries the server's reason).
        """
        with self._lifecycle:
            if self._phase is not _Phase.NEW:
                raise AlreadyStarted(
                    f"this client was already {self._phase.value}; "
                    "a client runs once, build a new one to start again"
                )
            if not len(self._config.workers):
                raise ConfigError(_NO_WORKERS)
            # Bound first (after the AlreadyStarted check): a busy port fails
            # start() with nothing running and the client still startable.
            ops = None
            if self._config.ops_addr:
                ops = OpsServer(
                    self._config.ops_addr,
                    registry=self._metrics.registry,
                    ready=self.ready,
                    client_id=self._id,
                    logger=self._config.logger,
                )
            try:
                # One connection, two reads: a wrong URL, a refused login, a
                # missing schema or a role that may not claim (ADR 0054) fails
                # start() with its real cause, before any thread starts.
                self._store.require_ready_to_work("start")
                # This code's limits hold for every client from its next claim.
                self._store.operator.declare_limits(declared_limits(self._config))
                # Built and launched under the lock, so a stop() racing this start
                # either sees NEW (and refuses) or a fully running engine.
                engine = Engine(
                    store=self._store,
                    config=self._config,
                    chain=self._chain,
                    metrics=self._metrics,
                    client_id=self._id,
                    max_jobs=self._max_jobs,
                    released=self._released,
                    hard_cancel=self._hard_cancel,
                    before_hand_back=self._before_hand_back,
                    async_chain=self._async_chain,
                )
                engine.start()
            except BaseException:
                if ops is not None:
                    ops.stop()
                raise
            self._engine = engine
            self._phase = _Phase.STARTED
            if ops is not None:
                ops.start()
                self._ops = ops

    def stop(self, timeout: Duration | None = None) -> None:
        """Stop claiming, drain in-flight jobs, and return once each recorded its outcome.

        ``timeout`` (``timedelta`` or seconds; ``None`` waits as long as it takes)
        bounds the wait for running handlers. When it runs out, their contexts
        are cancelled and their jobs returned to the queue, claimable at once;
        the attempt they used stays counted, so the next claim is the next
        attempt. Handlers that ignore cancellation may still be running after
        this returns, beside their jobs' next runs elsewhere, until they
        return (the interpreter waits for them at exit); their late outcomes
        are refused by the lease fence and logged, their side effects are
        not. ``drover worker`` ends its process after such a stop instead,
        and keeps the jobs from other workers until then (ADR 0053). A pool
        the client owns is closed last.

        A second call (or one racing the first) returns or raises the first
        call's verdict without draining again.

        Raises:
            drover.NotStarted: the client was never started.
            drover.DrainIncomplete: the budget ran out; ``.job_ids`` were handed back.
        """
        budget = None if timeout is None else max(0.0, to_seconds(timeout, "timeout"))
        with self._lifecycle:
            if self._phase is _Phase.NEW:
                raise NotStarted("stop() called on a client that was never started")
            first = self._phase is _Phase.STARTED
            if first:
                self._phase = _Phase.STOPPING
                self._stopping.set()
        if not first:
            self._stopped.wait()
            if self._verdict is not None:
                raise self._verdict
            return
        engine = self._engine
        assert engine is not None
        verdict: DroverError | None = None
        try:
            verdict = engine.stop(budget)
        finally:
            self._verdict = verdict
            with self._lifecycle:
                self._phase = _Phase.STOPPED
            # Last, so probes saw 503 "draining" during the drain, not a refused connection.
            if self._ops is not None:
                self._ops.stop()
            self.close()
            self._stopped.set()
        if verdict is not None:
            raise verdict

    def run(self) -> None:
        """Start, block until SIGINT or SIGTERM, then stop with ``config.shutdown_timeout``.

        Must be called from the main thread (signal handlers live there). The
        previous handlers are restored before returning.

        Raises:
            drover.ConfigError: the client has no workers (as `start`), before
                any signal handler is installed.
            drover.DrainIncomplete: as ``stop``.
        """
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("Client.run() installs signal handlers and needs the main thread")
        if not len(self._config.workers):
            raise ConfigError(_NO_WORKERS)
        received = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            received.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start()
            while not received.wait(0.5):
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.stop(self._config.shutdown_timeout)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(self._config.shutdown_timeout)

    # --- observability ----------------------------------------------------------------------

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """The Prometheus registry this client records on (serve it yourself if no ops_addr)."""
        return self._metrics.registry

    @property
    def ops_addr(self) -> tuple[str, int] | None:
        """Where the ops listener of ``config.ops_addr`` is bound while started, else ``None``.

        ``(host, port)`` with the port the system chose for ``:0``.
        """
        return self._ops.address if self._ops is not None else None

    @property
    def ops_address(self) -> tuple[str, int] | None:
        """Deprecated: the old name of ``ops_addr``."""
        warnings.warn(
            "Client.ops_address is deprecated; use Client.ops_addr",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.ops_addr

    def ready(self) -> tuple[bool, str]:
        """What ``/readyz`` answers: ``(True, "ok")`` or ``(False, reason)``.

        Ready means started, not draining, every background service's thread
        still running, and the last queue-stats refresh succeeded within two
        of ``drover.plugins.QueueStats``' intervals (a database outage turns
        this false within two intervals, and true again after recovery), and
        no other plugin says it is not ready (``Plugin.not_ready``, giving its
        reason). A service thread that died
        makes it false for good, naming the service (``"service died:
        fetcher"``): the client no longer does all its work and should be
        restarted. While a background loop's latest database call failed
        transiently (no connection to be had, the server's statement or lock
        timeout), it is false with ``"database unavailable: <service>:
        <the server's reason>"``, and true again as soon as that loop's next
        call succeeds (ADR 0044). A memory read; safe to call from any thread.
        """
        phase, engine = self._phase, self._engine
        if phase is _Phase.STOPPING or phase is _Phase.STOPPED:
            return False, "draining"
        if phase is not _Phase.STARTED or engine is None:
            return False, "not started"
        dead = engine.dead_services()
        if self._notifier is not None and self._notifier.died is not None:
            dead.append(self._notifier.name)
        if dead:
            return False, f"service died: {', '.join(dead)}"
        trouble = engine.trouble.not_ready()
        if trouble is not None:
            return False, trouble
        # The plugins' readiness: QueueStats' "queue stats stale" (ADR 0046).
        reason = engine.plugins.not_ready()
        if reason is not None:
            return False, reason
        return True, "ok"

    @property
    def running(self) -> bool:
        """True between a successful ``start`` and the beginning of ``stop``."""
        return self._phase is _Phase.STARTED

    def close(self) -> None:
        """Send pending wake-ups, then close the pool if the client opened it; idempotent.

        The notifier thread sends what inserts queued (waiting up to 2 s for
        a connection, then up to 10 s for the thread) and ends. A pool passed
        in by the application is left open, and inserts on it after ``close``
        still work and notify inline; on the client's own pool they fail with
        ``drover.DatabaseError``. Close the client before the pool you
        gave it: a wake-up still pending when that pool closes is dropped. A
        client never closed sends its pending wake-ups at interpreter exit.
        Closing a running client without ``stop`` strands its jobs until
        their leases expire.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self._notifier is not None:
            # Pending wake-ups go out first, while the pool is still open.
            self._notifier.stop()
        self._awaiter.stop()
        self._store.close()

    def __repr__(self) -> str:
        owner = "own pool" if self._store.owned else "borrowed pool"
        return f"<drover.Client {self._id} {self._phase.value}, {owner}>"
