-- Queries the running client issues: claims, outcomes, lease renewal, rescue.
-- Every write made on behalf of a claim is fenced on (id, attempt, state =
-- 'running'): a worker whose claim was superseded (rescued and re-claimed, or
-- handed back at shutdown) cannot change the row. Lease deadlines and dueness
-- use the database clock; the client sends durations, never instants.

-- name: job_claim
-- Up to a limit of due jobs of one queue: the highest priority first, then
-- the oldest due time, then the lowest id. SKIP LOCKED lets many clients
-- claim concurrently without waiting on each other; each claim spends an
-- attempt and leases the row. A paused queue yields nothing (one primary-key
-- probe of drover_queues per claim).
--
-- Limits: when drover_limits has a row for this queue or for any kind, the
-- claim changes nothing and returns one row of NULLs instead, and the client
-- claims through job_claim_limited (ADR 0025). Without limits that is two
-- probes of an empty table per claim.
--
-- A plain ORDER BY priority DESC, scheduled_at, id over the fetch index
-- would have to step over every job of a priority that is not due yet
-- (50 000 jobs scheduled for tomorrow at the top priority: 50 000 index
-- entries read by every claim). Instead "levels" walks the distinct
-- priorities of the queue's waiting jobs from the highest down, one index
-- descent each (backwards over the index, so each level is met at its newest
-- job, not at the entries of the jobs claimed last, which linger at a
-- level's oldest end until vacuum), and for each level reads only its due
-- jobs, oldest first,
-- stopping at the limit: a claim reads O(levels visited x log n) entries,
-- never a level's future jobs (ADR 0024). Both parts are demand-driven, so
-- a level that fills the limit ends the walk.
--
-- The limit is a subquery, (SELECT %(limit)s), not a plain parameter: a
-- plan made for one limit then costs the same as the generic plan, so once
-- psycopg prepares the statement PostgreSQL keeps the generic plan (the same
-- shape) instead of planning this longer statement again on every claim,
-- which cost a third more time per claim of 5 jobs.
--
-- The picked ids reach the UPDATE as an array (id = ANY (ARRAY(...))), not
-- as a CTE joined back: psycopg prepares a statement after a few runs, and
-- PostgreSQL's generic plan for the join form, not knowing the LIMIT, chose
-- a hash join over a sequential scan of the whole table for every claim
-- (4 ms instead of 0.3 ms at 20 000 rows). The array form is a primary-key
-- probe per picked row whatever the plan.
WITH claimed AS (
UPDATE drover_jobs j
SET state = 'running',
    attempt = j.attempt + 1,
    leased_until = now() + make_interval(secs => %(lease_seconds)s),
    leased_by = %(holder)s,
    attempted_at = now()
WHERE j.id = ANY (ARRAY(
    WITH RECURSIVE levels (priority) AS (
        (
            SELECT w.priority
            FROM drover_jobs w
            WHERE w.state IN ({{states:waiting}})
              AND w.queue = %(queue)s
              AND NOT EXISTS (
                  SELECT 1 FROM drover_queues q
                  WHERE q.name = %(queue)s AND q.paused_at IS NOT NULL
              )
              AND NOT EXISTS (
                  SELECT 1 FROM drover_limits l
                  WHERE l.scope = 'kind' OR (l.scope = 'queue' AND l.target = %(queue)s)
              )
            ORDER BY w.priority DESC
            LIMIT 1
        )
        UNION ALL
        SELECT (
            SELECT w.priority
            FROM drover_jobs w
            WHERE w.state IN ({{states:waiting}})
              AND w.queue = %(queue)s
              AND w.priority < levels.priority
            ORDER BY w.priority DESC
            LIMIT 1
        )
        FROM levels
        WHERE levels.priority IS NOT NULL
    )
    SELECT due.id
    FROM levels
    CROSS JOIN LATERAL (
        SELECT d.id
        FROM drover_jobs d
        WHERE d.state IN ({{states:waiting}})
          AND d.queue = %(queue)s
          AND d.priority = levels.priority
          AND d.scheduled_at <= now()
        ORDER BY d.scheduled_at, d.id
        LIMIT (SELECT %(limit)s::bigint)
        FOR UPDATE SKIP LOCKED
    ) due
    LIMIT (SELECT %(limit)s::bigint)
))
RETURNING {{job_columns:j}}
)
SELECT * FROM claimed
UNION ALL
SELECT {{job_nulls}}
WHERE EXISTS (
    SELECT 1 FROM drover_limits l
    WHERE l.scope = 'kind' OR (l.scope = 'queue' AND l.target = %(queue)s)
);

-- name: job_claim_limited
-- The claim of a queue a limit applies to: drover_claim_limited (migration
-- 0008, made cheaper by 0012) counts and admits under the limits' locks in
-- one round trip.
-- Returns the job's columns and whether a concurrency limit applied to it.
SELECT {{job_columns:j}}, c.o_concurrency
FROM drover_claim_limited(
    %(queue)s, %(limit)s::integer, %(lease_seconds)s::double precision, %(holder)s
) c
CROSS JOIN LATERAL (SELECT (c.o_job).*) j;

-- name: job_record_outcomes
-- Many outcomes in one round trip. Each input row carries the claim it
-- belongs to and the state to move to. A NULL scheduled_at on a waiting state
-- means "now" on the database clock; refund_attempt returns the claim's
-- attempt (snooze). The result has one row per input: applied, or the row's
-- current state and attempt (NULL when the job no longer exists) to explain why not.
WITH input AS (
    SELECT *
    FROM unnest(
        %(ids)s::bigint[], %(attempts)s::int[], %(states)s::text[],
        %(scheduled_at)s::timestamptz[], %(errors)s::jsonb[], %(refund_attempt)s::bool[],
        %(results)s::text[]
    ) AS t(id, attempt, state, scheduled_at, error, refund_attempt, result)
),
updated AS (
    -- A job an operator asked to cancel while it ran (cancel_request, ADR
    -- 0030) ends cancelled whatever the outcome: never retried, rescheduled
    -- or completed, its errors entry the operator's reason.
    UPDATE drover_jobs j
    SET state = CASE
            WHEN j.cancel_request IS NULL THEN i.state::drover_job_state
            ELSE 'cancelled'
        END,
        attempt = CASE
            WHEN i.refund_attempt AND j.cancel_request IS NULL THEN GREATEST(j.attempt - 1, 0)
            ELSE j.attempt
        END,
        scheduled_at = CASE
            WHEN i.state IN ({{states:waiting}}) AND j.cancel_request IS NULL
                THEN COALESCE(i.scheduled_at, now())
            ELSE j.scheduled_at
        END,
        errors = CASE
            WHEN j.cancel_request IS NOT NULL
                THEN j.errors || jsonb_build_array(drover_cancel_entry(j.cancel_request, j.attempt))
            WHEN i.error IS NULL THEN j.errors
            ELSE j.errors || jsonb_build_array(i.error)
        END,
        result = CASE
            WHEN i.state = 'completed' AND j.cancel_request IS NULL THEN i.result::jsonb
            ELSE j.result
        END,
        leased_until = NULL,
        finalized_at = CASE
            WHEN i.state IN ({{states:terminal}}) OR j.cancel_request IS NOT NULL THEN now()
            ELSE NULL
        END
    FROM input i
    -- By primary key, never through the partial lease index (see job_complete_many).
    WHERE j.id = ANY (%(ids)s::bigint[])
      AND j.id = i.id AND j.attempt = i.attempt AND (j.state = 'running') IS TRUE
    -- The claim that was applied, not just the job: a batch may carry a stale
    -- and a current outcome for one job, and only the current one can apply.
    -- A caller waiting for an awaited job's end is told at commit (see
    -- job_complete_many).
    RETURNING i.id, i.attempt, j.state::text AS state, j.has_dependents,
        (CASE WHEN j.awaited AND j.state IN ({{states:terminal}})
              THEN pg_notify('drover_done', i.id::text) END) IS NULL AS quiet
), released AS (
    -- Dependents (ADR 0029): completed jobs release theirs, dead and
    -- cancelled ones cancel theirs; nothing is called for a batch of jobs
    -- without dependents.
    SELECT drover_release_dependents(array_agg(id) FILTER (WHERE state = 'completed')),
           drover_cancel_dependents(
               array_agg(id) FILTER (WHERE state IN ({{states:unsuccessful}})),
               array_agg(state) FILTER (WHERE state IN ({{states:unsuccessful}})))
    FROM updated
    WHERE has_dependents
    HAVING count(*) > 0
)
SELECT i.id, i.attempt, u.id IS NOT NULL, cur.state::text, cur.attempt,
       COALESCE(u.state = 'cancelled' AND i.state <> 'cancelled', false)
FROM input i
LEFT JOIN updated u ON u.id = i.id AND u.attempt = i.attempt
LEFT JOIN drover_jobs cur ON cur.id = i.id
WHERE (SELECT count(*) FROM released) >= 0;

-- name: job_complete_many
-- The one completion statement: the completer's usual batch (every outcome a
-- plain completion) and Job.complete_tx's single claim in the caller's
-- transaction. The same fence and the same column changes as
-- job_record_outcomes, with two integer arrays in and the refused claims out
-- (usually none, so usually no row to send or build). The caller looks up
-- why (rare) with job_current_states.
--
-- A plan that cannot go wrong, whatever the statistics say: the rows are
-- found by primary key (id = ANY), and the fence's state test is written
-- `(state = 'running') IS TRUE` (the same test: state is NOT NULL) so the
-- planner cannot match it to the partial lease index. On a table never
-- analyzed (a burst after a quiet period) it chose that index, whose dead
-- entries grow with every completed job, and drained at two thirds speed.
--
-- Results (ADR 0028): each claim's result as JSON text, or NULL. A job a
-- caller awaits (Client.result set its awaited flag) is announced on channel
-- drover_done, payload its id, from the RETURNING list, which PostgreSQL
-- evaluates for every updated row even though nothing reads it. pg_notify
-- runs only for awaited rows, so a batch nobody waits for sends nothing and
-- its commit does not take the notification queue's lock (ADR 0008).
--
-- Cancel requests (ADR 0030): a job an operator asked to cancel while it ran
-- (cancel_request set) ends cancelled instead, without its result, with the
-- operator's reason as its errors entry; it comes back with cancelled =
-- true. A refused claim comes back with false. Neither happens in a usual
-- batch, which still returns no row.
WITH done AS (
    UPDATE drover_jobs j
    SET state = CASE
            WHEN j.cancel_request IS NULL THEN 'completed'
            ELSE 'cancelled'
        END::drover_job_state,
        leased_until = NULL,
        finalized_at = now(),
        result = CASE WHEN j.cancel_request IS NULL THEN d.result::jsonb END,
        errors = CASE
            WHEN j.cancel_request IS NULL THEN j.errors
            ELSE j.errors || jsonb_build_array(drover_cancel_entry(j.cancel_request, j.attempt))
        END
    FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[], %(results)s::text[])
        AS d(id, attempt, result)
    WHERE j.id = ANY (%(ids)s::bigint[])
      AND j.id = d.id AND j.attempt = d.attempt AND (j.state = 'running') IS TRUE
    RETURNING j.id, j.attempt, j.has_dependents, j.cancel_request IS NOT NULL AS cancelled,
        (CASE WHEN j.awaited THEN pg_notify('drover_done', j.id::text) END) IS NULL AS quiet
), released AS (
    -- Dependents (ADR 0029): only when a finished job has some, so a batch
    -- without any calls nothing (HAVING leaves no row). A completed job
    -- releases its dependents; one cancelled on request cancels them.
    SELECT drover_release_dependents(array_agg(id) FILTER (WHERE NOT cancelled)) AS n,
           drover_cancel_dependents(
               array_agg(id) FILTER (WHERE cancelled),
               array_agg('cancelled'::text) FILTER (WHERE cancelled))
    FROM done
    WHERE has_dependents
    HAVING count(*) > 0
)
SELECT d.id, d.attempt, false
FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[]) AS d(id, attempt)
-- A condition without columns runs once, before the first row (a one-time
-- filter): it makes the release run even when every claim applied.
WHERE (SELECT count(*) FROM released) >= 0
  AND NOT EXISTS (SELECT 1 FROM done WHERE done.id = d.id AND done.attempt = d.attempt)
UNION ALL
SELECT id, attempt, true FROM done WHERE cancelled;

-- name: job_current_states
-- Why some fenced writes were refused (or a complete_tx): the rows' state and attempt now.
SELECT id, state::text, attempt FROM drover_jobs WHERE id = ANY(%s::bigint[]);

-- name: job_extend_leases
-- Renew every held lease in one statement. Rows that moved on (finished,
-- rescued, re-claimed) are never resurrected. A row another transaction holds
-- locked (a handler's complete_tx not yet committed, an operator's update) is
-- skipped for this beat rather than waited for, so one open transaction cannot
-- stall the renewal of every other lease. One result row per held claim: the
-- new expiry (NULL if not renewed) and whether the claim is still current as
-- of the statement's snapshot (false: this client has lost the job).
WITH held AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS h(id, attempt)
),
renewed AS (
    UPDATE drover_jobs j
    SET leased_until = now() + make_interval(secs => %(lease_seconds)s)
    FROM held
    WHERE j.id = held.id AND j.attempt = held.attempt AND (j.state = 'running') IS TRUE
      AND j.id = ANY (ARRAY(
          -- The lock the UPDATE takes anyway (FOR NO KEY UPDATE), so a foreign
          -- key pointing at the job (FOR KEY SHARE) does not make it skip; and
          -- only the rows this client still holds, so other clients' claims
          -- are never locked here.
          SELECT c.id FROM drover_jobs c JOIN held h ON h.id = c.id AND h.attempt = c.attempt
          WHERE c.id = ANY (%(ids)s::bigint[]) AND (c.state = 'running') IS TRUE
          FOR NO KEY UPDATE OF c SKIP LOCKED
      ))
    RETURNING j.id, j.leased_until
)
SELECT held.id, r.leased_until,
       COALESCE(cur.state = 'running' AND cur.attempt = held.attempt, false),
       -- An operator's request to cancel the job (ADR 0030): the fallback
       -- for a client that does not listen for it.
       CASE WHEN cur.attempt = held.attempt THEN cur.cancel_request END
FROM held
LEFT JOIN renewed r ON r.id = held.id
LEFT JOIN drover_jobs cur ON cur.id = held.id;

-- name: job_claim_expired
-- The rescuer's claim: running rows whose lease passed. Re-leasing them (same
-- attempt) makes this sweep their owner until it records their outcome;
-- concurrent sweeps skip each other's rows. Same array form as job_claim.
UPDATE drover_jobs j
SET leased_until = now() + make_interval(secs => %(lease_seconds)s)
WHERE j.id = ANY (ARRAY(
    SELECT id
    FROM drover_jobs
    WHERE state = 'running' AND leased_until <= now()
    ORDER BY leased_until, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING {{job_columns:j}};
