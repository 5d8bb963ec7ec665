-- Operator reads and writes (the Inspector and the CLI). Operator writes are
-- conditioned on the state they start from, never fenced on an attempt: they
-- act on the job, not on a claim, and race-safely lose to a worker that
-- finishes the same job first.

-- name: job_list
SELECT id, kind, queue, args::text, state::text, attempt, max_attempts, errors::text,
       scheduled_at, leased_until, created_at, finalized_at, unique_key
FROM drover_jobs
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text::drover_job_state)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_cancel
-- Waiting or dead jobs only; running ones belong to a worker.
UPDATE drover_jobs
SET state = 'cancelled', finalized_at = now(), leased_until = NULL
WHERE id = %(id)s AND state IN ({{states:cancellable}})
RETURNING id, kind, queue, args::text, state::text, attempt, max_attempts, errors::text,
          scheduled_at, leased_until, created_at, finalized_at, unique_key;

-- name: job_retry
-- Redrive a dead job: a full set of attempts again, its error history kept.
UPDATE drover_jobs
SET state = 'available', attempt = 0, scheduled_at = now(), leased_until = NULL,
    finalized_at = NULL
WHERE id = %(id)s AND state IN ({{states:retriable}})
RETURNING id, kind, queue, args::text, state::text, attempt, max_attempts, errors::text,
          scheduled_at, leased_until, created_at, finalized_at, unique_key;
