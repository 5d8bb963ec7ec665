-- Operator reads and writes (the Inspector and the CLI). Operator writes are
-- conditioned on the state they start from, never fenced on an attempt: they
-- act on the job, not on a claim, and race-safely lose to a worker that
-- finishes the same job first.

-- name: job_list
-- %(args)s, when given, is JSON the job's args must contain (jsonb @>): every
-- key of an object with an equal value, recursively. No index serves it; the
-- walk down the primary key stops at the limit. %(tags)s, when given, are tags
-- the job must all carry (ADR 0032); "tags <> '{}'" lets the partial GIN index
-- serve it (never called with an empty list).
SELECT {{job_columns}}
FROM drover_jobs
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text::drover_job_state)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
  AND (%(args)s::jsonb IS NULL OR args @> %(args)s::jsonb)
  AND (%(tags)s::text[] IS NULL OR (tags @> %(tags)s::text[] AND tags <> '{}'))
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_cancel
-- Pending, waiting or dead jobs only; running ones belong to a worker. A
-- caller awaiting the job's end (Client.result) is told at commit, and the
-- job's pending dependents are cancelled with it (ADR 0029).
WITH cancelled AS (
    UPDATE drover_jobs
    SET state = 'cancelled', finalized_at = now(), leased_until = NULL
    WHERE id = %(id)s AND state IN ({{states:cancellable}})
    RETURNING {{job_columns}}, has_dependents,
        (CASE WHEN awaited THEN pg_notify('drover_done', id::text) END) IS NULL AS quiet
), dependents AS (
    SELECT drover_cancel_dependents(ARRAY[id], ARRAY['cancelled']) FROM cancelled
    WHERE has_dependents
)
SELECT * FROM cancelled WHERE (SELECT count(*) FROM dependents) >= 0;

-- name: job_retry
-- Redrive a dead or cancelled job: a full set of attempts again, its error
-- history kept. A job with dependencies (a workflow step) goes back to
-- pending while some of them have not completed, and is not redriven while
-- one of them is dead or cancelled (the operator retries that one first).
-- Its dependencies are locked first, in the order the completion statement
-- locks them (the dependency, then its dependents: no deadlock), so a
-- dependency completing meanwhile is either seen completed here or sees this
-- job pending and releases it (ADR 0029).
WITH deps AS MATERIALIZED (
    SELECT p.id, p.state
    FROM drover_jobs p
    WHERE p.id IN (SELECT e.depends_on FROM drover_job_deps e WHERE e.job_id = %(id)s)
    ORDER BY p.id
    FOR NO KEY UPDATE
), open AS (
    SELECT count(*) FILTER (WHERE state <> 'completed')::integer AS n,
           COALESCE(bool_or(state IN ({{states:unsuccessful}})), false) AS failed
    FROM deps
)
UPDATE drover_jobs j
SET state = CASE WHEN o.n > 0 THEN 'pending' ELSE 'available' END::drover_job_state,
    pending_deps = o.n, attempt = 0, scheduled_at = now(), leased_until = NULL,
    finalized_at = NULL, cancel_request = NULL
FROM open o
WHERE j.id = %(id)s AND j.state IN ({{states:retriable}}) AND NOT o.failed
RETURNING {{job_columns:j}};

-- name: job_failed_dependency
-- Why a retry was refused: the first dependency of the job that ended dead
-- or cancelled, and its state.
SELECT p.id, p.state::text
FROM drover_job_deps e
JOIN drover_jobs p ON p.id = e.depends_on
WHERE e.job_id = %(id)s AND p.state IN ({{states:unsuccessful}})
ORDER BY p.id
LIMIT 1;

-- name: job_count_dead_of_kind
-- How many dead jobs of one kind (optionally one queue) there are: what the
-- status page asks the operator to confirm before job_retry_dead_of_kind
-- (which may redrive fewer: it skips held unique keys and locked rows).
SELECT count(*)
FROM drover_jobs
WHERE state = 'dead' AND kind = %(kind)s
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text);

-- name: job_retry_dead_of_kind
-- Redrive every dead job of one kind (optionally one queue) at once. A dead
-- job whose unique key is held again by a waiting or running job stays dead
-- (redriving it would break the key's promise), and of several dead jobs
-- sharing a key only the newest is redriven. Rows locked by a concurrent
-- operator are skipped. Listening workers are woken per queue at commit.
WITH candidates AS (
    SELECT d.id, d.queue
    FROM drover_jobs d
    WHERE d.state = 'dead' AND d.kind = %(kind)s
      AND (%(queue)s::text IS NULL OR d.queue = %(queue)s::text)
      AND (d.unique_key IS NULL OR (
          NOT EXISTS (
              SELECT 1 FROM drover_jobs a
              WHERE a.queue = d.queue AND a.kind = d.kind AND a.unique_key = d.unique_key
                AND a.state IN ({{states:active}})
          )
          AND d.id = (
              SELECT max(x.id) FROM drover_jobs x
              WHERE x.queue = d.queue AND x.kind = d.kind AND x.unique_key = d.unique_key
                AND x.state = 'dead'
          )
      ))
      -- The same for a unique identity (ADR 0031).
      AND (d.unique_hash IS NULL OR d.unique_states = 0 OR (
          NOT EXISTS (
              SELECT 1 FROM drover_jobs a
              WHERE a.unique_hash = d.unique_hash AND a.unique_bucket = d.unique_bucket
                AND (a.unique_states & drover_state_bit(a.state)) <> 0 AND a.id <> d.id
          )
          AND d.id = (
              SELECT max(x.id) FROM drover_jobs x
              WHERE x.unique_hash = d.unique_hash AND x.unique_bucket = d.unique_bucket
                AND x.unique_states <> 0 AND x.state = 'dead'
          )
      ))
    FOR UPDATE SKIP LOCKED
), redriven AS (
    UPDATE drover_jobs j
    SET state = 'available', attempt = 0, scheduled_at = now(), leased_until = NULL,
        finalized_at = NULL, cancel_request = NULL
    FROM candidates c
    WHERE j.id = c.id AND j.state = 'dead'
    RETURNING j.id, j.queue
)
SELECT count(*), (SELECT count(pg_notify('drover', q)) FROM (SELECT DISTINCT queue AS q FROM redriven) qs)
FROM redriven;

-- name: job_cancel_many
-- An operator's bulk cancel: every listed job that is waiting or dead, in one
-- statement; the others (running, finished, missing) are left as they are.
-- Returns the ids it cancelled.
WITH cancelled AS (
    UPDATE drover_jobs
    SET state = 'cancelled', finalized_at = now(), leased_until = NULL
    WHERE id = ANY (%(ids)s::bigint[]) AND state IN ({{states:cancellable}})
    RETURNING id, has_dependents,
        (CASE WHEN awaited THEN pg_notify('drover_done', id::text) END) IS NULL AS quiet
), dependents AS (
    SELECT drover_cancel_dependents(array_agg(id), array_agg('cancelled'::text))
    FROM cancelled
    WHERE has_dependents
    HAVING count(*) > 0
)
SELECT id FROM cancelled WHERE (SELECT count(*) FROM dependents) >= 0;

-- name: job_retry_many
-- An operator's bulk retry: every listed job that is dead or cancelled goes
-- back to available with fresh attempts, in one statement, with the rules of
-- job_retry_dead_of_kind: a job whose unique key is held again by a waiting
-- or running job stays as it is, of several listed jobs sharing a key only
-- the newest is redriven, rows a concurrent operator holds are skipped, and
-- listening workers are woken per queue at commit. Returns the redriven ids.
-- Dependencies as in job_retry: locked first; a job goes back to pending
-- while some are not completed, and stays as it is while one is dead or
-- cancelled.
WITH deps AS MATERIALIZED (
    SELECT p.id, p.state
    FROM drover_jobs p
    WHERE p.id IN (
        SELECT e.depends_on FROM drover_job_deps e WHERE e.job_id = ANY (%(ids)s::bigint[])
    )
    ORDER BY p.id
    FOR NO KEY UPDATE
), open AS MATERIALIZED (
    SELECT e.job_id,
           count(*) FILTER (WHERE x.state <> 'completed')::integer AS n,
           bool_or(x.state IN ({{states:unsuccessful}})) AS failed
    FROM drover_job_deps e
    JOIN deps x ON x.id = e.depends_on
    WHERE e.job_id = ANY (%(ids)s::bigint[])
    GROUP BY e.job_id
), candidates AS (
    SELECT d.id, COALESCE(o.n, 0) AS n
    FROM drover_jobs d
    LEFT JOIN open o ON o.job_id = d.id
    WHERE d.id = ANY (%(ids)s::bigint[]) AND d.state IN ({{states:retriable}})
      AND NOT COALESCE(o.failed, false)
      AND (d.unique_key IS NULL OR (
          NOT EXISTS (
              SELECT 1 FROM drover_jobs a
              WHERE a.queue = d.queue AND a.kind = d.kind AND a.unique_key = d.unique_key
                AND a.state IN ({{states:active}})
          )
          AND d.id = (
              SELECT max(x.id) FROM drover_jobs x
              WHERE x.id = ANY (%(ids)s::bigint[])
                AND x.queue = d.queue AND x.kind = d.kind AND x.unique_key = d.unique_key
                AND x.state IN ({{states:retriable}})
          )
      ))
      -- The same for a unique identity (ADR 0031): skipped while another job
      -- holds it; of several listed jobs sharing it, only the newest.
      AND (d.unique_hash IS NULL OR d.unique_states = 0 OR (
          NOT EXISTS (
              SELECT 1 FROM drover_jobs a
              WHERE a.unique_hash = d.unique_hash AND a.unique_bucket = d.unique_bucket
                AND (a.unique_states & drover_state_bit(a.state)) <> 0 AND a.id <> d.id
          )
          AND d.id = (
              SELECT max(x.id) FROM drover_jobs x
              WHERE x.id = ANY (%(ids)s::bigint[])
                AND x.unique_hash = d.unique_hash AND x.unique_bucket = d.unique_bucket
                AND x.unique_states <> 0 AND x.state IN ({{states:retriable}})
          )
      ))
    FOR UPDATE OF d SKIP LOCKED
), redriven AS (
    UPDATE drover_jobs j
    SET state = CASE WHEN c.n > 0 THEN 'pending' ELSE 'available' END::drover_job_state,
        pending_deps = c.n, attempt = 0, scheduled_at = now(), leased_until = NULL,
        finalized_at = NULL, cancel_request = NULL
    FROM candidates c
    WHERE j.id = c.id AND j.state IN ({{states:retriable}})
    RETURNING j.id, j.queue, j.state
)
SELECT COALESCE(array_agg(id ORDER BY id), '{}'::bigint[]),
       (SELECT count(pg_notify('drover', q))
        FROM (SELECT DISTINCT queue AS q FROM redriven WHERE state = 'available') qs)
FROM redriven;

-- name: job_lease_holder
SELECT leased_by FROM drover_jobs WHERE id = %(id)s;

-- name: stats_throughput
-- Per minute over the last %(minutes)s minutes (database clock): jobs that
-- completed, attempts that ran and failed (error entries stamped in the
-- minute; not cancellations, nor the entry of a job cancelled before it ran,
-- as stats_kinds counts them) and jobs that went dead; of one kind and one
-- queue when %(kind)s and %(queue)s are given. A failure inside the window
-- belongs to a job that is still waiting or running, or finished after it, so
-- only those rows are read: the waiting and running partial indexes and
-- drover_jobs_finalized_idx.
WITH bounds AS (
    SELECT date_trunc('minute', now()) - make_interval(mins => %(minutes)s - 1) AS since
), finished AS (
    SELECT date_trunc('minute', j.finalized_at) AS minute, j.state::text AS state
    FROM drover_jobs j, bounds b
    WHERE (j.state = 'completed' OR j.state = 'dead') AND j.finalized_at >= b.since
      AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
), failures AS (
    SELECT date_trunc('minute', (e.value->>'at')::timestamptz) AS minute
    FROM bounds b, drover_jobs j
    CROSS JOIN LATERAL jsonb_array_elements(j.errors) AS e(value)
    WHERE (j.state IN ({{states:active}}) OR (j.finalized_at IS NOT NULL AND j.finalized_at >= b.since))
      AND j.errors <> '[]'::jsonb
      AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (e.value->>'at')::timestamptz >= b.since
      AND (e.value->>'attempt')::integer > 0
      AND e.value->>'error' NOT LIKE 'drover: job cancelled by operator%%'
      AND e.value->>'error' NOT LIKE 'job cancelled by handler%%'
      AND e.value->>'error' NOT LIKE 'dependency %% so this job will not run'
)
SELECT minute, 'completed', count(*) FROM finished WHERE state = 'completed' GROUP BY minute
UNION ALL
SELECT minute, 'dead', count(*) FROM finished WHERE state = 'dead' GROUP BY minute
UNION ALL
SELECT minute, 'failed', count(*) FROM failures GROUP BY minute
UNION ALL
SELECT since, 'since', 0 FROM bounds;
