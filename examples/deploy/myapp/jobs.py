"""The job kinds of the example application, and the Client its worker processes run.

`drover worker myapp.jobs:make_client` is the command every deployment file in
this folder runs (the systemd unit, the Dockerfile, the Kubernetes manifest).
Each worker process calls `make_client()` and gets a Client of its own. The
web side of the application inserts these jobs in its own transactions with
`client.insert_tx(conn, SendWelcome(...))` and never starts a worker pool.

The database URL comes from `DATABASE_URL`, which the deployment files set
from a file or a secret, never from the command line: a password on a command
line is visible to every user of the machine.
"""

from __future__ import annotations

import logging
import os

import drover

# No logging set-up here: `drover worker` configures logging on standard error
# when the application has not (text or --log-format json), so its records (jobs
# started, failed, retried, dead; the shutdown drain) reach the journal or the
# container's log. An application that configures logging itself keeps its own.
log = logging.getLogger("myapp.jobs")


class SendWelcome(drover.JobArgs, kind="send_welcome", queue="email", max_attempts=8):
    """Email a new user once their account is committed."""

    user_id: int
    email: str


class PruneSessions(drover.JobArgs, kind="prune_sessions", queue="maintenance"):
    """Housekeeping that runs every night (a periodic job)."""


workers = drover.Workers()


@workers.register
def send_welcome(job: drover.Job[SendWelcome]) -> None:
    # A real handler calls the mail provider with an idempotency key (the job
    # id), because a job can run twice: after a crash, or when the shutdown
    # budget runs out and the job is handed back.
    log.info("welcome email for user %d to %s", job.args.user_id, job.args.email)


@workers.register
def prune_sessions(job: drover.Job[PruneSessions]) -> None:
    log.info("pruned expired sessions")


def make_client() -> drover.Client:
    """The Client one worker process runs; called once in each process.

    The drain budget and the ops port are not set here: the deployment files
    pass `--shutdown-timeout` and `--ops-addr`, next to the kill timeout and
    the probes that must agree with them.
    """
    config = drover.Config(
        workers=workers,
        concurrency=10,
        queues={"email": 3, "maintenance": 1},
        plugins=[
            drover.plugins.Periodic(
                jobs=[drover.PeriodicJob("prune-sessions", "30 3 * * *", PruneSessions())]
            )
        ],
    )
    return drover.Client(os.environ["DATABASE_URL"], config)
