-- Read-only counts for progress displays and (later) the Inspector.

-- name: job_counts_by_state
SELECT queue, state::text, count(*)
FROM drover_jobs
GROUP BY queue, state
ORDER BY queue, state;

-- name: stats_depth
-- Rows per queue in the five published states. One branch per partial index
-- (waiting, running, dead) so the cost follows the backlog, never the
-- history of completed and cancelled rows. The waiting rows are counted per
-- level (queue, priority) and the running ones per queue, each with the
-- earliest due time or lease among them. With %(full)s false (ADR 0059),
-- only the levels given are read, each from its floor, and only the leases
-- past %(running_floor)s: the entries that claimed and completed jobs left
-- below are never read. One row, of state 'now', carries the count's time.
SELECT queue, state::text, priority, count(*), min(scheduled_at)
FROM drover_jobs
WHERE %(full)s AND state IN ({{states:waiting}})
GROUP BY queue, priority, state
UNION ALL
SELECT l.queue, level.state::text, l.priority, level.count, level.earliest
FROM unnest(%(queues)s::text[], %(priorities)s::int[], %(floors)s::timestamptz[])
    AS l(queue, priority, floor)
CROSS JOIN LATERAL (
    -- Per level, so that each is read from the fetch index from its floor.
    SELECT j.state, count(*) AS count, min(j.scheduled_at) AS earliest
    FROM drover_jobs j
    WHERE j.queue = l.queue AND j.priority = l.priority AND j.scheduled_at >= l.floor
      AND j.state IN ({{states:waiting}})
    GROUP BY j.state
) AS level
WHERE NOT %(full)s
UNION ALL
SELECT queue, 'running', NULL, count(*), min(leased_until)
FROM drover_jobs
WHERE %(full)s AND state = 'running'
GROUP BY queue
UNION ALL
SELECT queue, 'running', NULL, count(*), min(leased_until)
FROM drover_jobs
WHERE NOT %(full)s AND state = 'running' AND leased_until > %(running_floor)s
GROUP BY queue
UNION ALL
SELECT queue, 'dead', NULL, count(*), NULL
FROM drover_jobs
WHERE state = 'dead'
GROUP BY queue
UNION ALL
SELECT NULL, 'now', NULL, 0, now();

-- name: stats_oldest_age
-- Age of the oldest job each queue could claim right now: the fetch
-- predicate (a paused queue claims nothing, so it reports nothing), the
-- database clock.
SELECT j.queue, EXTRACT(EPOCH FROM now() - min(j.scheduled_at))::float8
FROM drover_jobs j
WHERE j.state IN ({{states:waiting}})
  AND j.scheduled_at <= now()
  AND NOT EXISTS (
      SELECT 1 FROM drover_queues q WHERE q.name = j.queue AND q.paused_at IS NOT NULL
  )
GROUP BY j.queue;

-- name: stats_oldest_age_floored
-- stats_oldest_age read as stats_depth reads with %(full)s false (ADR 0059):
-- only the levels given, each from its floor.
SELECT l.queue, EXTRACT(EPOCH FROM now() - min(first.scheduled_at))::float8
FROM unnest(%(queues)s::text[], %(priorities)s::int[], %(floors)s::timestamptz[])
    AS l(queue, priority, floor)
CROSS JOIN LATERAL (
    SELECT j.scheduled_at FROM drover_jobs j
    WHERE j.queue = l.queue AND j.priority = l.priority AND j.scheduled_at >= l.floor
      AND j.scheduled_at <= now() AND j.state IN ({{states:waiting}})
    ORDER BY j.scheduled_at
    LIMIT 1
) AS first
WHERE NOT EXISTS (
    SELECT 1 FROM drover_queues q WHERE q.name = l.queue AND q.paused_at IS NOT NULL
)
GROUP BY l.queue;

-- name: server_settings
-- What a benchmark report must state about the server it ran on.
SELECT name, setting
FROM pg_settings
WHERE name IN ('server_version', 'fsync', 'synchronous_commit', 'shared_buffers',
               'max_connections', 'wal_level', 'full_page_writes')
ORDER BY name;

-- name: stats_analyze
-- Fresh planner statistics. Benchmarks run it after filling the table so they
-- measure the steady state instead of plans made for an empty table.
ANALYZE drover_jobs;

-- name: bench_create_database
-- `drover bench --mode burst`: a database of its own, so drover_jobs starts
-- never analyzed. {name} is filled in with psycopg.sql.Identifier.
CREATE DATABASE {name};

-- name: bench_drop_database
DROP DATABASE {name} WITH (FORCE);

-- name: stats_kinds
-- Per kind over the last %(minutes)s minutes (database clock): jobs that
-- completed, went dead and ended cancelled in the window, attempts that
-- failed in it (error entries stamped in the window, whatever the job's
-- state now, of attempts that ran: not the entry of a job cancelled before
-- it ran, because a dependency ended badly or an operator cancelled it, nor
-- a cancellation, which the cancelled count has), and the
-- 50th and 95th percentile run time of the completed ones (their last
-- attempt: claim to completion; jobs never claimed by a worker have no
-- attempted_at and are left out). Reads only the window's rows and the
-- backlog: drover_jobs_finalized_idx for the finished, the waiting and
-- running partial indexes for the failures of jobs still active.
-- The window's start is written out in each branch, not joined from a CTE,
-- so that each branch's index condition can use it.
WITH finished AS (
    SELECT j.kind, j.state, EXTRACT(EPOCH FROM j.finalized_at - j.attempted_at)::float8 AS run
    FROM drover_jobs j
    WHERE j.state IN ({{states:terminal}})
      AND j.finalized_at >= now() - make_interval(mins => %(minutes)s)
), per_kind AS (
    SELECT kind,
           count(*) FILTER (WHERE state = 'completed') AS completed,
           count(*) FILTER (WHERE state = 'dead') AS dead,
           count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY run)
               FILTER (WHERE state = 'completed' AND run IS NOT NULL) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY run)
               FILTER (WHERE state = 'completed' AND run IS NOT NULL) AS p95
    FROM finished
    GROUP BY kind
), failing AS (
    -- A failure in the window belongs to a job still waiting or running, or
    -- finished in the window: one branch per index, never an OR across them
    -- (which the planner can only answer with a scan of the whole table).
    SELECT j.kind, j.errors FROM drover_jobs j
    WHERE j.state IN ({{states:waiting}}) AND j.errors <> '[]'::jsonb
    UNION ALL
    SELECT j.kind, j.errors FROM drover_jobs j
    WHERE j.state = 'running' AND j.errors <> '[]'::jsonb
    UNION ALL
    SELECT j.kind, j.errors FROM drover_jobs j
    WHERE j.state IN ({{states:terminal}})
      AND j.finalized_at >= now() - make_interval(mins => %(minutes)s)
      AND j.errors <> '[]'::jsonb
), failures AS (
    SELECT f.kind, count(*) AS failed
    FROM failing f
    CROSS JOIN LATERAL jsonb_array_elements(f.errors) AS e(value)
    WHERE (e.value->>'at')::timestamptz >= now() - make_interval(mins => %(minutes)s)
      AND (e.value->>'attempt')::integer > 0
      AND e.value->>'error' NOT LIKE 'drover: job cancelled by operator%%'
      AND e.value->>'error' NOT LIKE 'job cancelled by handler%%'
      AND e.value->>'error' NOT LIKE 'dependency %% so this job will not run'
    GROUP BY f.kind
)
SELECT COALESCE(p.kind, f.kind), COALESCE(p.completed, 0), COALESCE(f.failed, 0),
       COALESCE(p.dead, 0), p.p50, p.p95, COALESCE(p.cancelled, 0)
FROM per_kind p
FULL JOIN failures f ON f.kind = p.kind
ORDER BY 1;
