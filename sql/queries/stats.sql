-- Read-only counts for progress displays and (later) the Inspector.

-- name: job_counts_by_state
SELECT queue, state::text, count(*)
FROM drover_jobs
GROUP BY queue, state
ORDER BY queue, state;

-- name: stats_depth
-- Rows per queue in the five published states. One branch per partial index
-- (waiting, running, dead) so the cost follows the backlog, never the
-- history of completed and cancelled rows.
SELECT queue, state::text, count(*)
FROM drover_jobs
WHERE state IN ({{states:waiting}})
GROUP BY queue, state
UNION ALL
SELECT queue, 'running', count(*)
FROM drover_jobs
WHERE state = 'running'
GROUP BY queue
UNION ALL
SELECT queue, 'dead', count(*)
FROM drover_jobs
WHERE state = 'dead'
GROUP BY queue;

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
