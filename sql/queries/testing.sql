-- drover.testing: working jobs synchronously inside a test.

-- name: job_claim_after
-- job_claim restricted to ids above a watermark (the jobs one test inserted),
-- across every queue, in job_claim's order: the highest priority first, then
-- the oldest due time, then the lowest id. The same lease and attempt rules.
UPDATE drover_jobs j
SET state = 'running',
    attempt = j.attempt + 1,
    leased_until = now() + make_interval(secs => %(lease_seconds)s),
    leased_by = 'drover.testing'
WHERE j.id = ANY (ARRAY(
    SELECT id
    FROM drover_jobs
    WHERE state IN ({{states:waiting}})
      AND id > %(after)s
      AND scheduled_at <= now()
      AND (%(queues)s::text[] IS NULL OR queue = ANY (%(queues)s::text[]))
    ORDER BY priority DESC, scheduled_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING {{job_columns:j}};

-- name: job_list_after
SELECT {{job_columns}}
FROM drover_jobs
WHERE id > %(after)s
ORDER BY id;

-- name: job_max_id
SELECT COALESCE(max(id), 0) FROM drover_jobs;
