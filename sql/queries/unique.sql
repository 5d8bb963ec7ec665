-- Inserts with a unique identity, debounce or throttle (ADR 0031). The work
-- is drover_insert_unique in migration 0015: it takes the items as one JSON
-- array and inserts them one after another, each in statements of its own
-- snapshot, so an item that lost a race reads the job that won it.

-- name: job_insert_unique
-- Positional parameters: the items (see drover_insert_unique), notify. One
-- row per item, in input order: whether an existing job was returned, then
-- the job's columns (all NULL for a plain item whose unique_key was taken).
SELECT u.duplicate, {{job_columns:j}}
FROM drover_insert_unique(%s::jsonb, %s::boolean) u
CROSS JOIN LATERAL (SELECT (u.job).*) j
ORDER BY u.ord;

-- name: job_insert_unique_begin
-- Run first in a caller's transaction that may not have run a statement yet,
-- so that the batch's nested transaction is a savepoint, not the outermost.
SELECT 1;

-- name: job_insert_identified_now
-- The common case of job_insert_identified: due now, no period. The column
-- defaults give state available, scheduled_at = created_at = now() and
-- bucket 0, so this is job_insert_now plus the identity and its arbiter; it
-- returns only what drover cannot know. Positional parameters: kind, queue,
-- args, max_attempts, priority, hash (hex), states (mask), notify.
INSERT INTO drover_jobs (kind, queue, args, max_attempts, priority, unique_hash, unique_states)
VALUES (%s, %s, %s::jsonb, %s, %s, decode(%s, 'hex'), %s)
ON CONFLICT (unique_hash, unique_bucket)
    WHERE unique_hash IS NOT NULL
      AND (unique_states & drover_state_bit(state)) <> 0
    DO NOTHING
RETURNING id, created_at, CASE WHEN %s::boolean THEN pg_notify('drover', queue)::text END;

-- name: job_insert_identified
-- The fast path of one job with a plain unique identity (form 'u'): one
-- INSERT as lean as job_insert's, the period's bucket counted on the
-- database clock (0 without a period: div of NULL is NULL). When the
-- identity is held it returns no row, and drover calls job_insert_unique,
-- which returns the holder (retrying with fresh snapshots if the holder
-- leaves its states meanwhile). Positional parameters: kind, queue, args,
-- max_attempts, priority, scheduled_at (twice), hash (hex), period
-- (microseconds), states (mask), notify.
INSERT INTO drover_jobs (kind, queue, args, max_attempts, priority, scheduled_at, state,
                         unique_hash, unique_bucket, unique_states)
VALUES (%s, %s, %s::jsonb, %s, %s::smallint,
        GREATEST(COALESCE(%s::timestamptz, now()), now()),
        CASE WHEN %s::timestamptz > now() THEN 'scheduled' ELSE 'available' END::drover_job_state,
        decode(%s, 'hex'),
        COALESCE(div(extract(epoch FROM now())::numeric * 1000000, %s::numeric)::bigint, 0),
        %s::smallint)
ON CONFLICT (unique_hash, unique_bucket)
    WHERE unique_hash IS NOT NULL
      AND (unique_states & drover_state_bit(state)) <> 0
    DO NOTHING
RETURNING id, created_at, state::text, scheduled_at,
          CASE WHEN %s::boolean THEN pg_notify('drover', queue)::text END;

-- name: job_unique_identity
-- A job's identity for an operator: hash (hex), period bucket, the states
-- that hold it (mask), and whether it holds it now. No row: no such job.
SELECT encode(unique_hash, 'hex'), unique_bucket, unique_states,
       (unique_states & drover_state_bit(state)) <> 0
FROM drover_jobs
WHERE id = %(id)s;

-- name: job_unique_holder
-- The job holding an identity, after job_insert_identified(_now) found it
-- held: the bucket counted again on the database clock (a new window may have
-- begun since; then no row, and drover asks job_insert_unique). Positional
-- parameters: hash (hex), period (microseconds, or NULL).
SELECT {{job_columns}}
FROM drover_jobs
WHERE unique_hash = decode(%s, 'hex')
  AND unique_bucket = COALESCE(
      div(extract(epoch FROM now())::numeric * 1000000, %s::numeric)::bigint, 0)
  AND (unique_states & drover_state_bit(state)) <> 0;
