-- Cluster-wide limits (ADR 0025): declarations from code, operators'
-- overrides, and what each limit is using now. A trigger keeps the limits'
-- gates (drover_gates, migration 0018) in step with drover_limits in the
-- writer's transaction, and the limited claim reads drover_limits, so a
-- change here holds from every client's next claim. Changes notify channel
-- "drover" with "*", which wakes every listening client's fetcher: jobs a
-- limit held back start at once.

-- name: limit_declare
-- What a starting client's code declares, one row per limit. Overrides are
-- kept; a declaration replaces the previous one whole (a field the code no
-- longer sets becomes NULL; counts_starts is what the code says). No
-- wake-up: a declaration at start usually repeats the last one.
INSERT INTO drover_limits AS l (
    scope, target, partition_by,
    declared_concurrency, declared_rate, declared_per, counts_starts, declared_at, updated_at
)
SELECT t.scope, t.target, t.part, t.conc, t.rate, make_interval(secs => t.per), t.starts,
       now(), now()
FROM unnest(
    %(scopes)s::text[], %(targets)s::text[], %(parts)s::text[],
    %(concs)s::int[], %(rates)s::int[], %(pers)s::float8[], %(starts)s::boolean[]
) AS t(scope, target, part, conc, rate, per, starts)
ON CONFLICT (scope, target, partition_by) DO UPDATE
SET declared_concurrency = excluded.declared_concurrency,
    declared_rate = excluded.declared_rate,
    declared_per = excluded.declared_per,
    counts_starts = excluded.counts_starts,
    declared_at = excluded.declared_at,
    updated_at = CASE
        WHEN (l.declared_concurrency, l.declared_rate, l.declared_per, l.counts_starts)
             IS NOT DISTINCT FROM
             (excluded.declared_concurrency, excluded.declared_rate, excluded.declared_per,
              excluded.counts_starts)
        THEN l.updated_at
        ELSE now()
    END;

-- name: limit_set
-- An operator's override of the values given (the others keep their
-- override or declaration); creates the limit when no code declared it.
-- Returns the limit's id; the row stays locked until the caller's
-- transaction ends, so the caller reads back what it wrote (limit_list),
-- never a concurrent operator's delete.
WITH set AS (
    INSERT INTO drover_limits AS l (
        scope, target, partition_by,
        override_concurrency, override_rate, override_per, overridden_at, updated_at
    )
    VALUES (
        %(scope)s, %(target)s, %(part)s,
        %(conc)s, %(rate)s, make_interval(secs => %(per)s::float8), now(), now()
    )
    ON CONFLICT (scope, target, partition_by) DO UPDATE
    SET override_concurrency = COALESCE(excluded.override_concurrency, l.override_concurrency),
        override_rate = COALESCE(excluded.override_rate, l.override_rate),
        override_per = COALESCE(excluded.override_per, l.override_per),
        overridden_at = now(),
        updated_at = now()
    RETURNING l.id
)
SELECT id, pg_notify('drover', '*')::text FROM set;

-- name: limit_lock
-- The first step of clearing an override: lock the limit's row (until the
-- caller's transaction ends) and say whether code declares it and whether
-- an operator overrode it. The caller then clears the override of a
-- declared limit (limit_clear) or removes an undeclared one (limit_delete):
-- two statements, because one statement cannot both update a row and
-- delete it (a data-modifying CTE does not see its sibling's update, and
-- PostgreSQL keeps only one of two changes to a row in one statement).
SELECT declared_at IS NOT NULL, overridden_at IS NOT NULL
FROM drover_limits
WHERE scope = %(scope)s AND target = %(target)s AND partition_by = %(part)s
FOR UPDATE;

-- name: limit_clear
-- Drop an operator's override of a declared limit: the declared values
-- apply again. Run after limit_lock, which holds the row.
WITH cleared AS (
    UPDATE drover_limits
    SET override_concurrency = NULL, override_rate = NULL, override_per = NULL,
        overridden_at = NULL, updated_at = now()
    WHERE scope = %(scope)s AND target = %(target)s AND partition_by = %(part)s
    RETURNING id
)
SELECT id, pg_notify('drover', '*')::text FROM cleared;

-- name: limit_delete
-- Remove a limit, declared or not (its starts go with it). A client whose
-- code still declares it writes it again when it next starts.
WITH removed AS (
    DELETE FROM drover_limits
    WHERE scope = %(scope)s AND target = %(target)s AND partition_by = %(part)s
    RETURNING id
)
SELECT id, pg_notify('drover', '*')::text FROM removed;

-- name: limit_list
-- Every limit (or the one with id %(id)s) with its effective, declared and
-- override values, and its use now, per partition: running jobs (read
-- through the partial lease index: running rows only) and starts in the
-- current window (what the claim counts), a partition being full when
-- either is at its limit. A limit without partition_by has one partition,
-- ''. Per limit: the totals, the partitions in use and full, and the five
-- busiest partitions of a partitioned one (running, then starts).
WITH lim AS (
    SELECT l.*,
           COALESCE(l.override_concurrency, l.declared_concurrency) AS conc,
           COALESCE(l.override_rate, l.declared_rate) AS rate,
           COALESCE(l.override_per, l.declared_per, interval '1 second') AS per,
           -- The window's start, once per limit rather than once per start row.
           now() - COALESCE(l.override_per, l.declared_per, interval '1 second') AS since
    FROM drover_limits l
    WHERE %(id)s::integer IS NULL OR l.id = %(id)s::integer
),
running AS (
    -- A kind's jobs and a queue's, joined apart: each join is an equality
    -- the planner can hash, where one join on "kind or queue" compares every
    -- limit with every running job.
    SELECT r.id,
           CASE WHEN r.partition_by = '' THEN ''
                ELSE COALESCE((r.args -> r.partition_by)::text, 'null') END AS part,
           count(*) AS n
    FROM (
        SELECT l.id, l.partition_by, j.args
        FROM lim l JOIN drover_jobs j ON j.state = 'running' AND j.kind = l.target
        WHERE l.scope = 'kind'
        UNION ALL
        SELECT l.id, l.partition_by, j.args
        FROM lim l JOIN drover_jobs j ON j.state = 'running' AND j.queue = l.target
        WHERE l.scope = 'queue'
    ) r
    GROUP BY 1, 2
),
started AS (
    SELECT s.limit_id AS id, s.part, sum(s.starts) AS n
    FROM lim l
    JOIN drover_limit_starts s ON s.limit_id = l.id AND s.started_at > l.since
    WHERE l.rate IS NOT NULL
    GROUP BY 1, 2
),
use AS (
    SELECT u.id, u.part, u.running, u.started,
           (u.running >= l.conc OR u.started >= l.rate) IS TRUE AS full
    FROM (
        SELECT COALESCE(r.id, s.id) AS id, COALESCE(r.part, s.part) AS part,
               COALESCE(r.n, 0)::bigint AS running, COALESCE(s.n, 0)::bigint AS started
        FROM running r
        FULL JOIN started s ON s.id = r.id AND s.part = r.part
    ) u
    JOIN lim l ON l.id = u.id
)
SELECT l.scope, l.target, l.partition_by,
       l.conc, l.rate, extract(epoch FROM l.per)::float8,
       l.declared_at IS NOT NULL,
       l.declared_concurrency, l.declared_rate, extract(epoch FROM l.declared_per)::float8,
       l.overridden_at IS NOT NULL,
       l.override_concurrency, l.override_rate, extract(epoch FROM l.override_per)::float8,
       COALESCE(t.running, 0)::bigint, COALESCE(t.started, 0)::bigint,
       COALESCE(t.parts, 0)::bigint, COALESCE(t.full, 0)::bigint,
       COALESCE(b.parts, '{}'), COALESCE(b.running, '{}'), COALESCE(b.started, '{}'),
       COALESCE(b.full, '{}'),
       l.updated_at, l.counts_starts
FROM lim l
LEFT JOIN LATERAL (
    SELECT sum(u.running) AS running, sum(u.started) AS started, count(*) AS parts,
           count(*) FILTER (WHERE u.full) AS full
    FROM use u WHERE u.id = l.id
) t ON true
LEFT JOIN LATERAL (
    SELECT array_agg(top.part ORDER BY top.running DESC, top.started DESC, top.part) AS parts,
           array_agg(top.running ORDER BY top.running DESC, top.started DESC, top.part) AS running,
           array_agg(top.started ORDER BY top.running DESC, top.started DESC, top.part) AS started,
           array_agg(top.full ORDER BY top.running DESC, top.started DESC, top.part) AS full
    FROM (
        SELECT u.* FROM use u
        WHERE u.id = l.id AND l.partition_by <> ''
        ORDER BY u.running DESC, u.started DESC, u.part
        LIMIT 5
    ) top
) b ON true
ORDER BY l.scope, l.target, l.partition_by;

-- name: limit_take_start
-- The start of a handler under the rate limits that count starts
-- (Limit(counts="starts"), ADR 0052), taken by the worker just before the
-- handler runs: (the start's time, NULL) when it was recorded (or no such
-- limit applies), (NULL, seconds to wait before asking again) when a window
-- is full, (NULL, NULL) with the job's state and attempt now when the claim
-- was lost. drover_take_start (migration 0019) has the rules.
SELECT s.o_started, s.o_wait, s.o_state, s.o_attempt
FROM drover_take_start(%(job)s::bigint, %(attempt)s::integer) s;

-- name: job_claim_limited
-- The claim of a queue a limit applies to (the 'limits' gate, migration
-- 0018: the kernel's job_claim refuses a gated queue and the client claims
-- here): drover_claim_limited (migration 0008, made cheaper by 0012) counts
-- and admits under the limits' locks in one round trip.
-- Returns the job's columns and whether a concurrency limit applied to it.
SELECT {{job_columns:j}}, c.o_concurrency
FROM drover_claim_limited(
    %(queue)s, %(limit)s::integer, %(lease_seconds)s::double precision, %(holder)s
) c
CROSS JOIN LATERAL (SELECT (c.o_job).*) j;
