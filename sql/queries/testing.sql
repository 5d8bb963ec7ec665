-- drover.testing: working jobs synchronously inside a test.

-- name: job_claim_after
-- job_claim restricted to ids above a watermark (the jobs one test inserted),
-- across every queue, oldest due first. The same lease and attempt rules.
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
    ORDER BY scheduled_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING j.id, j.kind, j.queue, j.args::text, j.state::text, j.attempt, j.max_attempts,
          j.errors::text, j.scheduled_at, j.leased_until, j.created_at, j.finalized_at,
          j.unique_key;

-- name: job_list_after
SELECT id, kind, queue, args::text, state::text, attempt, max_attempts, errors::text,
       scheduled_at, leased_until, created_at, finalized_at, unique_key
FROM drover_jobs
WHERE id > %(after)s
ORDER BY id;

-- name: job_max_id
SELECT COALESCE(max(id), 0) FROM drover_jobs;
