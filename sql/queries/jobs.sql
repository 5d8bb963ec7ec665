-- Runtime queries. Each block starts with "-- name: <entity>_<verb>" and runs
-- only through drover._db. Placeholders are psycopg's %(name)s style so the
-- same text works with client-side binding (Django's cursors) and server-side
-- binding. jsonb columns are returned as text and parsed by drover, because
-- Django registers a text loader for jsonb on its connections.

-- name: job_insert
-- One job. The database clock decides dueness: a missing or past time means
-- now. A unique-key collision with a non-terminal job inserts nothing (and
-- returns no row) instead of raising, so a caller's transaction is never
-- aborted by a duplicate. With notify set, the same statement queues a
-- wake-up for the job's queue, delivered when the transaction commits.
WITH due AS (
    SELECT GREATEST(COALESCE(%(scheduled_at)s::timestamptz, now()), now()) AS at
)
INSERT INTO drover_jobs (kind, queue, args, max_attempts, scheduled_at, state, unique_key)
SELECT %(kind)s, %(queue)s, %(args)s::jsonb, %(max_attempts)s, due.at,
       CASE WHEN due.at > now() THEN 'scheduled' ELSE 'available' END::drover_job_state,
       %(unique_key)s
FROM due
ON CONFLICT (queue, kind, unique_key)
    WHERE unique_key IS NOT NULL
      AND state IN ('available', 'scheduled', 'retryable', 'running')
    DO NOTHING
RETURNING id, kind, queue, args::text, state::text, attempt, max_attempts, errors::text,
          scheduled_at, leased_until, created_at, finalized_at, unique_key,
          CASE WHEN %(notify)s::boolean THEN pg_notify('drover', queue)::text END;

-- name: job_insert_batch_stage
-- A per-transaction staging table for COPY. Ids are drawn from the jobs
-- table's own identity sequence as rows arrive, so every staged row knows its
-- final id and the batch can be returned in input order without relying on
-- INSERT ... SELECT preserving order. IF NOT EXISTS + TRUNCATE lets one
-- transaction insert several batches.
CREATE TEMP TABLE IF NOT EXISTS drover_insert_batch (
    ord          integer     NOT NULL,
    id           bigint      NOT NULL DEFAULT nextval('drover_jobs_id_seq'),
    kind         text        NOT NULL,
    queue        text        NOT NULL,
    args         jsonb       NOT NULL,
    max_attempts integer     NOT NULL,
    scheduled_at timestamptz,
    unique_key   text
) ON COMMIT DROP;
TRUNCATE drover_insert_batch;

-- name: job_insert_batch_copy
COPY drover_insert_batch (ord, kind, queue, args, max_attempts, scheduled_at, unique_key)
FROM STDIN;

-- name: job_insert_batch_apply
-- Same dueness rule and unique-key handling as job_insert. Rows skipped by
-- ON CONFLICT are simply missing from the result; the caller compares counts.
WITH inserted AS (
    INSERT INTO drover_jobs (id, kind, queue, args, max_attempts, scheduled_at, state, unique_key)
    OVERRIDING SYSTEM VALUE
    SELECT b.id, b.kind, b.queue, b.args, b.max_attempts, due.at,
           CASE WHEN due.at > now() THEN 'scheduled' ELSE 'available' END::drover_job_state,
           b.unique_key
    FROM drover_insert_batch b
    CROSS JOIN LATERAL (
        SELECT GREATEST(COALESCE(b.scheduled_at, now()), now()) AS at
    ) due
    ORDER BY b.ord
    ON CONFLICT (queue, kind, unique_key)
        WHERE unique_key IS NOT NULL
          AND state IN ('available', 'scheduled', 'retryable', 'running')
        DO NOTHING
    RETURNING id, kind, queue, args::text AS args, state::text AS state, attempt, max_attempts,
              errors::text AS errors, scheduled_at, leased_until, created_at, finalized_at,
              unique_key
)
SELECT i.id, i.kind, i.queue, i.args, i.state, i.attempt, i.max_attempts, i.errors,
       i.scheduled_at, i.leased_until, i.created_at, i.finalized_at, i.unique_key
FROM inserted i
JOIN drover_insert_batch b ON b.id = i.id
ORDER BY b.ord;

-- name: job_insert_batch_staged_ids
-- After a batch came back short, which input positions lost to a unique key.
SELECT ord, id FROM drover_insert_batch ORDER BY ord;

-- name: job_get
SELECT id, kind, queue, args::text, state::text, attempt, max_attempts, errors::text,
       scheduled_at, leased_until, created_at, finalized_at, unique_key
FROM drover_jobs
WHERE id = %(id)s;
