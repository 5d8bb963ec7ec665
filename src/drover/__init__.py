"""drover: a PostgreSQL-backed job queue for Python.

Jobs are rows in PostgreSQL. Insert them inside your own transaction with
``Client.insert_tx`` and they exist if and only if that transaction
commits. Delivery is at-least-once: handlers must be idempotent.
"""

from __future__ import annotations

import logging

from drover import plugins as plugins  # the module: drover.plugins.Pruner(...)
from drover._durations import Duration
from drover._version import VERSION as __version__
from drover.async_client import AsyncClient
from drover.client import Client
from drover.config import Config
from drover.context import JobContext, Lease
from drover.errors import (
    AlreadyStarted,
    ArgsDecodeError,
    Cancel,
    CannotClaim,
    ConfigError,
    DatabaseError,
    DrainIncomplete,
    DroverError,
    DuplicateJob,
    InvalidArgument,
    InvalidInsertOpts,
    InvalidJobArgs,
    InvalidLimit,
    InvalidResult,
    InvalidTransition,
    JobCancelled,
    JobFailed,
    JobSignal,
    LeaseLost,
    MigrationError,
    NotFound,
    NotInTransaction,
    NotStarted,
    PermissionDenied,
    ResultTimeout,
    SchemaMissing,
    Snooze,
    UnknownJobKind,
    UnsupportedConnection,
)
from drover.health import HealthFinding, HealthReport, HealthSample, HealthThresholds
from drover.insert_middleware import InsertBatch, InsertMiddleware, InsertParams
from drover.inspector import (
    Inspector,
    KindStats,
    OperatorRights,
    QueueAge,
    QueueDepth,
    Stats,
    Throughput,
    WorkerInfo,
)
from drover.job import InsertItem, InsertOptions, InsertOpts, Job, JobArgs, JobRow, JobState
from drover.limits import Limit, LimitKey, LimitState, PartitionUse
from drover.log import JobLogFilter, Logging
from drover.middleware import (
    AsyncHandler,
    AsyncMiddleware,
    Handler,
    Middleware,
    Timeout,
    with_async_form,
)
from drover.migrations import (
    AppliedMigration,
    Migration,
    MigrationStatus,
    migrate,
    migration_status,
)
from drover.periodic import PeriodicInfo, PeriodicJob
from drover.plugins import Plugin, PluginContext, PluginStatus
from drover.queues import Queue, QueueState, QueueSummary
from drover.retention import Retention
from drover.retry import ExponentialRetryPolicy, RetryPolicy
from drover.schedule import Schedule
from drover.unique import Unique, UniqueIdentity
from drover.worker import Worker, Workers
from drover.workflows import (
    Chain,
    Group,
    InsertedWorkflow,
    Workflow,
    WorkflowJob,
    WorkflowSummary,
    chain,
    group,
)

logging.getLogger("drover").addHandler(logging.NullHandler())


__all__ = [
    "AlreadyStarted",
    "AppliedMigration",
    "ArgsDecodeError",
    "AsyncClient",
    "AsyncHandler",
    "AsyncMiddleware",
    "Cancel",
    "CannotClaim",
    "Chain",
    "Client",
    "Config",
    "ConfigError",
    "DatabaseError",
    "DrainIncomplete",
    "DroverError",
    "DuplicateJob",
    "Duration",
    "ExponentialRetryPolicy",
    "Group",
    "Handler",
    "HealthFinding",
    "HealthReport",
    "HealthSample",
    "HealthThresholds",
    "InsertBatch",
    "InsertItem",
    "InsertMiddleware",
    "InsertOptions",
    "InsertOpts",
    "InsertParams",
    "InsertedWorkflow",
    "Inspector",
    "InvalidArgument",
    "InvalidInsertOpts",
    "InvalidJobArgs",
    "InvalidLimit",
    "InvalidResult",
    "InvalidTransition",
    "Job",
    "JobArgs",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "JobLogFilter",
    "JobRow",
    "JobSignal",
    "JobState",
    "KindStats",
    "Lease",
    "LeaseLost",
    "Limit",
    "LimitKey",
    "LimitState",
    "Logging",
    "Middleware",
    "Migration",
    "MigrationError",
    "MigrationStatus",
    "NotFound",
    "NotInTransaction",
    "NotStarted",
    "OperatorRights",
    "PartitionUse",
    "PeriodicInfo",
    "PeriodicJob",
    "PermissionDenied",
    "Plugin",
    "PluginContext",
    "PluginStatus",
    "Queue",
    "QueueAge",
    "QueueDepth",
    "QueueState",
    "QueueSummary",
    "ResultTimeout",
    "Retention",
    "RetryPolicy",
    "Schedule",
    "SchemaMissing",
    "Snooze",
    "Stats",
    "Throughput",
    "Timeout",
    "Unique",
    "UniqueIdentity",
    "UnknownJobKind",
    "UnsupportedConnection",
    "Worker",
    "WorkerInfo",
    "Workers",
    "Workflow",
    "WorkflowJob",
    "WorkflowSummary",
    "__version__",
    "chain",
    "group",
    "migrate",
    "migration_status",
    "with_async_form",
]


def _documented_here() -> None:
    # Every public class is documented, and shown in reprs and tracebacks, as
    # drover.<Name>, wherever its module: set once, here, for all of them.
    for name in __all__:
        value = globals()[name]
        if isinstance(value, type) and value.__module__.startswith("drover."):
            value.__module__ = "drover"


_documented_here()
