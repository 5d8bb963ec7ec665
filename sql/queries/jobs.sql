-- Runtime queries. Each block starts with "-- name: <entity>_<verb>" and runs
-- only through drover._db. Placeholders are psycopg's: %(name)s, or plain %s
-- on the insert hot path, where each block lists its parameters in order
-- (psycopg skips the name-to-position mapping). jsonb columns are returned as
-- text and parsed by drover, because Django registers a text loader for jsonb
-- on its connections. In every file here, {{states:<set>}} stands for one of
-- the state sets defined in drover/job.py (waiting, active, terminal,
-- cancellable, ...), expanded to quoted states when the file is loaded.

-- name: job_insert_now
-- The common case: due now, no unique key. The column defaults make the row
-- available with scheduled_at = created_at = now(), and without a unique key
-- the arbiter index cannot match, so this is a plain INSERT that returns only
-- what drover cannot know (the id and the clock); drover builds the rest of
-- the row from what it sent. Positional parameters: kind, queue, args,
-- max_attempts, priority, notify.
INSERT INTO drover_jobs (kind, queue, args, max_attempts, priority)
VALUES (%s, %s, %s::jsonb, %s, %s)
RETURNING id, created_at, CASE WHEN %s::boolean THEN pg_notify('drover', queue)::text END;

-- name: job_insert
-- Any job. The database clock decides dueness: a missing or past time means
-- now. A unique-key collision with a non-terminal job inserts nothing (and
-- returns no row) instead of raising, so a caller's transaction is never
-- aborted by a duplicate. With notify set, the same statement queues a
-- wake-up for the job's queue, delivered when the transaction commits.
-- Positional parameters: scheduled_at, kind, queue, args, max_attempts,
-- unique_key, priority, tags, meta, notify.
WITH due AS (
    SELECT GREATEST(COALESCE(%s::timestamptz, now()), now()) AS at
)
INSERT INTO drover_jobs (kind, queue, args, max_attempts, scheduled_at, state, unique_key,
                         priority, tags, meta)
SELECT %s, %s, %s::jsonb, %s, due.at,
       CASE WHEN due.at > now() THEN 'scheduled' ELSE 'available' END::drover_job_state,
       %s, %s::smallint, %s::text[], COALESCE(%s::jsonb, '{}')
FROM due
ON CONFLICT (queue, kind, unique_key)
    WHERE unique_key IS NOT NULL
      AND state IN ({{states:active}})
    DO NOTHING
RETURNING id, created_at, state::text, scheduled_at,
          CASE WHEN %s::boolean THEN pg_notify('drover', queue)::text END;

-- name: job_insert_rows
-- Single-row inserts of concurrent callers, combined into one statement and
-- one transaction (see drover._inserter). The jobs arrive as one JSON array
-- of [kind, queue, args, max_attempts, scheduled_at, unique_key, priority]
-- arrays, with [..., tags, meta] appended for a job that has either (ADR 0032):
-- one parameter that drover builds from JSON it already holds, far
-- cheaper than seven array parameters. Ids are drawn first, so each input position learns
-- its id; a position whose unique key lost comes back with a NULL id (the
-- rules of job_insert, row by row; of two equal keys in one statement the
-- earlier position wins).
WITH r AS MATERIALIZED (
    SELECT nextval('drover_jobs_id_seq') AS id, e.ord,
           e.v->>0 AS kind, e.v->>1 AS queue, e.v->2 AS args,
           (e.v->>3)::integer AS max_attempts, e.v->>5 AS unique_key,
           (e.v->>6)::smallint AS priority,
           ARRAY(SELECT jsonb_array_elements_text(e.v->7)) AS tags,
           COALESCE(e.v->8, '{}') AS meta,
           GREATEST(COALESCE((e.v->>4)::timestamptz, now()), now()) AS at
    FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(v, ord)
), inserted AS (
    INSERT INTO drover_jobs (id, kind, queue, args, max_attempts, scheduled_at, state, unique_key,
                             priority, tags, meta)
    OVERRIDING SYSTEM VALUE
    SELECT id, kind, queue, args, max_attempts, at,
           CASE WHEN at > now() THEN 'scheduled' ELSE 'available' END::drover_job_state,
           unique_key, priority, tags, meta
    FROM r
    ORDER BY ord
    ON CONFLICT (queue, kind, unique_key)
        WHERE unique_key IS NOT NULL
          AND state IN ({{states:active}})
        DO NOTHING
    RETURNING id, created_at, state, scheduled_at
)
SELECT i.id, i.created_at, i.state::text, i.scheduled_at
FROM r LEFT JOIN inserted i ON i.id = r.id
ORDER BY r.ord;

-- name: job_insert_batch_reserve
-- A batch without unique keys is written straight into drover_jobs by COPY
-- (job_insert_batch_direct*). This draws its ids from the table's identity
-- sequence (the client sorts them, so that the batch keeps its input order in
-- the claim order; sorting here cost more), and reads the transaction's clock,
-- which is also what the COPY's created_at default will be. With queues given,
-- it also queues their wake-ups, delivered if the transaction commits.
-- Parameters: count, queues.
SELECT now(),
       array(SELECT nextval('drover_jobs_id_seq') FROM generate_series(1, %s)),
       (SELECT count(pg_notify('drover', q)) FROM unnest(%s::text[]) AS q);

-- name: job_insert_batch_direct
-- COPY writes identity values it is given (no OVERRIDING clause needed); the
-- defaults give every row state available and scheduled_at = created_at.
COPY drover_jobs (id, kind, queue, args, max_attempts, priority) FROM STDIN;

-- name: job_insert_batch_direct_timed
-- As job_insert_batch_direct, for a batch where some item has a time:
-- drover computes each row's due time and state from the clock read by
-- job_insert_batch_reserve, with the same rule as job_insert.
COPY drover_jobs (id, kind, queue, args, max_attempts, priority, scheduled_at, state) FROM STDIN;

-- name: job_insert_batch_direct_meta
-- As job_insert_batch_direct, for a batch whose jobs all carry one metadata
-- object and nothing else (a traced batch: its trace context, ADR 0042).
COPY drover_jobs (id, kind, queue, args, max_attempts, priority, meta) FROM STDIN;

-- name: job_insert_batch_direct_timed_meta
-- As job_insert_batch_direct_timed, with the shared metadata.
COPY drover_jobs (id, kind, queue, args, max_attempts, priority, scheduled_at, state, meta)
FROM STDIN;

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
    unique_key   text,
    priority     smallint    NOT NULL,
    tags         text[]      NOT NULL DEFAULT '{}',
    meta         jsonb       NOT NULL DEFAULT '{}'
) ON COMMIT DROP;
TRUNCATE drover_insert_batch;

-- name: job_insert_batch_copy
COPY drover_insert_batch (ord, kind, queue, args, max_attempts, scheduled_at, unique_key,
                         priority, tags, meta)
FROM STDIN;

-- name: job_insert_batch_apply
-- Same dueness rule and unique-key handling as job_insert. Rows skipped by
-- ON CONFLICT are simply missing from the result; the caller compares counts.
WITH inserted AS (
    INSERT INTO drover_jobs (id, kind, queue, args, max_attempts, scheduled_at, state, unique_key,
                             priority, tags, meta)
    OVERRIDING SYSTEM VALUE
    SELECT b.id, b.kind, b.queue, b.args, b.max_attempts, due.at,
           CASE WHEN due.at > now() THEN 'scheduled' ELSE 'available' END::drover_job_state,
           b.unique_key, b.priority, b.tags, b.meta
    FROM drover_insert_batch b
    CROSS JOIN LATERAL (
        SELECT GREATEST(COALESCE(b.scheduled_at, now()), now()) AS at
    ) due
    ORDER BY b.ord
    ON CONFLICT (queue, kind, unique_key)
        WHERE unique_key IS NOT NULL
          AND state IN ({{states:active}})
        DO NOTHING
    RETURNING {{job_columns}}
)
SELECT i.*
FROM inserted i
JOIN drover_insert_batch b ON b.id = i.id
ORDER BY b.ord;

-- name: job_insert_batch_staged_ids
-- After a batch came back short, which input positions lost to a unique key.
SELECT ord, id FROM drover_insert_batch ORDER BY ord;

-- name: job_get
-- Every query that returns jobs returns {{job_columns}}: the columns of
-- drover._db.rows.JOB_COLUMNS, in JobRow's order, jsonb and enums as text.
SELECT {{job_columns}}
FROM drover_jobs
WHERE id = %(id)s;
