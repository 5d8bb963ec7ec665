-- The kernel's statements (ADR 0045): at-least-once delivery and nothing
-- else. drover._db.kernel runs them for PgKernelStore (drover._kernel.store
-- states the rules). None of them names a feature: a feature reaches the
-- kernel only through its two doors (migration 0018):
--
-- * the claim's gate: a queue with a row in drover_gates is claimed by the
--   gate's own claim (limits: job_claim_limited, limits.sql);
-- * the completion's watch: a job for which drover_watched(j) holds (a
--   feature must see its end: a waiter, dependents, a cancel request, a
--   stored result) is refused by the kernel's completion and completed by
--   the features' statement (completion.sql), which handles every branch.
--
-- With no feature in use, a claim and a completion run only job_claim and
-- job_complete (or job_record) from this file; a busy fetcher's claim
-- carries the plain completions itself
-- (tests/db/test_kernel_statements.py counts them in pg_stat_statements).
--
-- Every write made on behalf of a claim is fenced on (id, attempt, state =
-- 'running'): a worker whose claim was superseded (rescued and re-claimed,
-- or handed back at shutdown) cannot change the row. Lease deadlines and
-- dueness use the database clock; the client sends durations, never
-- instants.
--
-- The kernel's one insert is jobs.sql's job_insert (PgKernelStore.insert).

-- name: job_claim
-- Up to a limit of due jobs of one queue: the highest priority first, then
-- the oldest due time, then the lowest id. SKIP LOCKED lets many clients
-- claim concurrently without waiting on each other; each claim spends an
-- attempt and leases the row. A paused queue yields nothing (one primary-key
-- probe of drover_queues per claim).
--
-- Gates (the claim's door, migration 0018): when drover_gates has a row for
-- this queue or for every queue ('*'), the claim changes nothing and returns
-- one row of NULLs instead, and the client claims through the gate's own
-- claim (a limit's: job_claim_limited in limits.sql, ADR 0025). Without a
-- gate that is two primary-key probes of an empty table per claim; the
-- claim never names a feature.
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
-- Floors (ADR 0059, drover._db.floors): claimed jobs leave their index
-- entries at a level's oldest end until vacuum removes them, which it cannot
-- while the MVCC horizon is pinned. With %(walk)s false the claim reads only
-- the levels in %(levels)s (sent highest first), each from its floor in
-- %(floors)s, an index bound below which nothing is read; with %(walk)s true
-- it walks every level from its oldest job, as described above. The claimer
-- walks now and then, to find what the floors hide.
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
--
-- The claim carries the completions of the fetcher's last round (the
-- completer's plain completions that were waiting when it claimed; none
-- is an empty array): one round trip and one commit for a batch's ends and
-- the next batch's starts, as the raw reference does (ADR 0058). "done" is
-- job_complete's update, fenced the same way; it runs whether or not the
-- queue is gated or anything is claimed (a data-modifying CTE always runs).
-- It cannot meet the claim's rows: it changes only running jobs, the claim
-- only waiting ones. A refused completion comes back as a row whose id and
-- attempt are the claim's and whose kind is NULL (a claimed job always has
-- a kind; the gate's marker has no id). The caller leaves those to the
-- completer, which writes them as any outcome (job_complete, then why, or
-- the features' statement for a watched job): a refusal is rare, and the
-- claim stays one statement with no read after it.
WITH done AS (
    UPDATE drover_jobs j
    SET state = 'completed',
        leased_until = NULL,
        finalized_at = now()
    WHERE j.id = ANY (%(done_ids)s::bigint[])
      AND NOT ((j.id, j.attempt) NOT IN (
          SELECT * FROM unnest(%(done_ids)s::bigint[], %(done_attempts)s::integer[])
      ))
      AND (j.state = 'running') IS TRUE
      AND NOT drover_watched(j)
    RETURNING j.id, j.attempt
),
claimed AS (
UPDATE drover_jobs j
SET state = 'running',
    attempt = j.attempt + 1,
    leased_until = now() + make_interval(secs => %(lease_seconds)s),
    leased_by = %(holder)s,
    attempted_at = now()
WHERE j.id = ANY (ARRAY(
    WITH RECURSIVE walked (priority) AS (
        (
            SELECT w.priority
            FROM drover_jobs w
            WHERE w.state IN ({{states:waiting}})
              AND w.queue = %(queue)s
              AND %(walk)s
            ORDER BY w.priority DESC
            LIMIT 1
        )
        UNION ALL
        SELECT (
            SELECT w.priority
            FROM drover_jobs w
            WHERE w.state IN ({{states:waiting}})
              AND w.queue = %(queue)s
              AND w.priority < walked.priority
            ORDER BY w.priority DESC
            LIMIT 1
        )
        FROM walked
        WHERE walked.priority IS NOT NULL
    ),
    levels (priority, floor) AS (
        SELECT walked.priority, '-infinity'::timestamptz
        FROM walked
        WHERE walked.priority IS NOT NULL
        UNION ALL
        -- In the order sent: the claimer sends its levels highest first, and
        -- unnest returns an array's elements in order (no sort in the plan).
        SELECT known.priority, known.floor
        FROM unnest(%(levels)s::smallint[], %(floors)s::timestamptz[])
            AS known (priority, floor)
        WHERE NOT %(walk)s
    )
    SELECT due.id
    FROM levels
    CROSS JOIN LATERAL (
        SELECT d.id
        FROM drover_jobs d
        WHERE d.state IN ({{states:waiting}})
          AND d.queue = %(queue)s
          AND d.priority = levels.priority
          AND d.scheduled_at >= levels.floor
          AND d.scheduled_at <= now()
        ORDER BY d.scheduled_at, d.id
        LIMIT (SELECT %(limit)s::bigint)
        FOR UPDATE SKIP LOCKED
    ) due
    WHERE NOT EXISTS (
        SELECT 1 FROM drover_queues q
        WHERE q.name = %(queue)s AND q.paused_at IS NOT NULL
    )
      AND NOT EXISTS (
        SELECT 1 FROM drover_gates g WHERE g.queue IN (%(queue)s, '*')
    )
    LIMIT (SELECT %(limit)s::bigint)
))
RETURNING {{job_columns:j}}
)
SELECT * FROM claimed
UNION ALL
SELECT {{job_nulls}}
WHERE EXISTS (SELECT 1 FROM drover_gates g WHERE g.queue IN (%(queue)s, '*'))
UNION ALL
SELECT {{job_refused:d}}
FROM unnest(%(done_ids)s::bigint[], %(done_attempts)s::integer[]) AS d(id, attempt)
WHERE NOT EXISTS (SELECT 1 FROM done WHERE done.id = d.id AND done.attempt = d.attempt);

-- name: job_gates
-- Which gates hold a queue (after job_claim said "gated"): the claim asks
-- once, then goes straight to the gate's claim for a while.
SELECT DISTINCT via FROM drover_gates WHERE queue IN (%(queue)s, '*') ORDER BY via;

-- name: job_complete
-- The completer's usual batch: every outcome a plain completion. Two integer
-- arrays in and the refused claims out (usually none, so usually no row to
-- send or build). A claim is refused when the fence fails or when a feature
-- watches the job (drover_watched, migration 0018); the caller looks up why
-- (rare) with job_current_states, and sends a claim still running with its
-- attempt to the features' completion (completion.sql: job_complete_many).
--
-- A plan that cannot go wrong, whatever the statistics say: the rows are
-- found by primary key (id = ANY), and the fence's state test is written
-- `(state = 'running') IS TRUE` (the same test: state is NOT NULL) so the
-- planner cannot match it to the partial lease index. On a table never
-- analyzed (a burst after a quiet period) it chose that index, whose dead
-- entries grow with every completed job, and drained at two thirds speed.
-- drover_watched(j) is inlined: a test of columns of the row already read.
-- The claims are matched through a hashed lookup: NOT (... NOT IN ...) stays
-- a subplan that PostgreSQL hashes once per statement (never NULL, so it
-- means IN). Joined to unnest() instead, the rows were matched in a nested
-- loop that unnested the batch again for every row: quadratic, 4 ms for 50
-- outcomes, 44 ms for 200.
WITH done AS (
    UPDATE drover_jobs j
    SET state = 'completed',
        leased_until = NULL,
        finalized_at = now()
    WHERE j.id = ANY (%(ids)s::bigint[])
      AND NOT ((j.id, j.attempt) NOT IN (
          SELECT * FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[])
      ))
      AND (j.state = 'running') IS TRUE
      AND NOT drover_watched(j)
    RETURNING j.id, j.attempt
)
SELECT d.id, d.attempt
FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[]) AS d(id, attempt)
WHERE NOT EXISTS (SELECT 1 FROM done WHERE done.id = d.id AND done.attempt = d.attempt);

-- name: job_record
-- Many outcomes in one round trip. Each input row carries the claim it
-- belongs to and the state to move to. A NULL scheduled_at on a waiting state
-- means "now" on the database clock; refund_attempt returns the claim's
-- attempt (snooze); an error is appended to the job's errors. Fenced as
-- job_complete, watched jobs included: the caller sends a refused claim
-- whose row (as this statement's snapshot saw it) is still running with the
-- claim's attempt to the features' statement (completion.sql:
-- job_record_outcomes), whose answer is final. The result has one row per
-- input: applied, or the row's state and attempt (NULL when the job no
-- longer exists) to explain why not.
--
-- No join between drover_jobs and the batch, so no plan can rescan one per
-- row of the other (joined to unnest(), the generic plan was a nested loop
-- that unnested the batch again for every row: quadratic, 40-52 ms for 200
-- outcomes; driven from the batch instead, a never-analyzed table got a
-- sequential scan under the same loop). The rows are found by primary key
-- (id = ANY, the fence's state test written as in job_complete) and each
-- finds its outcome in a map built once per statement: a jsonb object keyed
-- "id:attempt", so a stale and a current claim of one job stay apart. An
-- outcome is [state, scheduled_at, refund_attempt, [error] or []]. The row
-- applied is the snapshot's (attempt equal to the snapshot's attempt, also
-- when a concurrent update is re-checked), which is how the result tells the
-- applied claim: the job was updated and its attempt, as the snapshot saw it,
-- is the claim's. The rows' state and attempt are read per input row by
-- primary key (LATERAL, OFFSET 0: never flattened into a join).
WITH input AS MATERIALIZED (
    SELECT *
    FROM unnest(
        %(ids)s::bigint[], %(attempts)s::int[], %(states)s::text[],
        %(scheduled_at)s::timestamptz[], %(errors)s::jsonb[], %(refund_attempt)s::bool[]
    ) AS t(id, attempt, state, scheduled_at, error, refund_attempt)
),
outcome AS MATERIALIZED (
    SELECT jsonb_object_agg(
        i.id::text || ':' || i.attempt::text,
        jsonb_build_array(
            i.state, i.scheduled_at, i.refund_attempt,
            CASE WHEN i.error IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(i.error) END
        )
    ) AS by_claim
    FROM input i
),
updated AS (
    UPDATE drover_jobs j
    SET state = (o.by_claim -> (j.id::text || ':' || j.attempt::text) ->> 0)::drover_job_state,
        attempt = CASE
            WHEN (o.by_claim -> (j.id::text || ':' || j.attempt::text) ->> 2)::bool
            THEN GREATEST(j.attempt - 1, 0) ELSE j.attempt
        END,
        scheduled_at = CASE
            WHEN (o.by_claim -> (j.id::text || ':' || j.attempt::text) ->> 0) IN ({{states:waiting}})
            THEN COALESCE(
                (o.by_claim -> (j.id::text || ':' || j.attempt::text) ->> 1)::timestamptz, now()
            )
            ELSE j.scheduled_at
        END,
        errors = CASE
            WHEN o.by_claim -> (j.id::text || ':' || j.attempt::text) -> 3 = '[]'::jsonb THEN j.errors
            ELSE j.errors || (o.by_claim -> (j.id::text || ':' || j.attempt::text) -> 3)
        END,
        leased_until = NULL,
        finalized_at = CASE
            WHEN (o.by_claim -> (j.id::text || ':' || j.attempt::text) ->> 0) IN ({{states:terminal}})
            THEN now() ELSE NULL
        END
    FROM outcome o
    -- By primary key, never through the partial lease index (see job_complete).
    WHERE j.id = ANY (%(ids)s::bigint[])
      AND o.by_claim ? (j.id::text || ':' || j.attempt::text)
      AND (j.state = 'running') IS TRUE
      AND NOT drover_watched(j)
      AND j.attempt = (SELECT s.attempt FROM drover_jobs s WHERE s.id = j.id)
    RETURNING j.id
)
SELECT i.id, i.attempt,
    COALESCE(cur.attempt = i.attempt AND NOT (i.id NOT IN (SELECT u.id FROM updated u)), false),
    cur.state::text, cur.attempt
FROM input i
LEFT JOIN LATERAL (
    SELECT c.state, c.attempt FROM drover_jobs c WHERE c.id = i.id OFFSET 0
) cur ON true;

-- name: job_current_states
-- Why some fenced writes were refused (or a complete_tx): the rows' state and
-- attempt now, in a new snapshot. A refused claim still running with its
-- attempt is one a feature watches (or one changed under the write): the
-- caller completes it through the features' statement.
SELECT id, state::text, attempt FROM drover_jobs WHERE id = ANY(%s::bigint[]);

-- name: job_extend_leases
-- Renew every held lease in one statement. Rows that moved on (finished,
-- rescued, re-claimed) are never resurrected. A row another transaction holds
-- locked (a handler's complete_tx not yet committed, an operator's update) is
-- skipped for this beat rather than waited for, so one open transaction cannot
-- stall the renewal of every other lease. One result row per held claim: the
-- new expiry (NULL if not renewed) and whether the claim is still current as
-- of the statement's snapshot (false: this client has lost the job). An
-- operator's cancel request is not the kernel's: the cancels feature reads
-- it (cancel.sql: job_cancel_requests).
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
       COALESCE(cur.state = 'running' AND cur.attempt = held.attempt, false)
FROM held
LEFT JOIN renewed r ON r.id = held.id
LEFT JOIN drover_jobs cur ON cur.id = held.id;

-- name: job_claim_expired
-- The rescuer's claim: running rows whose lease passed (after %(floor)s unless
-- NULL, ADR 0059). Re-leasing them (same attempt) makes this sweep their owner
-- until it records their outcome; concurrent sweeps skip each other's rows.
-- Same array form as job_claim. The rescue's outcomes are written as the
-- completer's are (job_record, then the features' statement for watched
-- jobs). Rows lead with now(), the sweep's time: if none found, one of NULLs.
WITH swept AS (
    UPDATE drover_jobs j
    SET leased_until = now() + make_interval(secs => %(lease_seconds)s)
    WHERE j.id = ANY (ARRAY(
        SELECT id FROM drover_jobs
        WHERE state = 'running' AND leased_until <= now()
          AND leased_until > COALESCE(%(floor)s::timestamptz, '-infinity')
        ORDER BY leased_until, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING {{job_columns:j}}
)
SELECT now(), swept.* FROM (VALUES (0)) AS one(x) LEFT JOIN swept ON true;
