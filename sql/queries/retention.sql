-- Retention: deleting finished jobs once they are old enough.

-- name: prune_lock
-- One pruner at a time across every client: a transaction-level try-lock,
-- released with the batch's transaction. The key is "drover" then 0x0003,
-- mixed with the schema's name outside the default schema (one pruner per
-- installation).
SELECT pg_try_advisory_xact_lock(%(key)s::bigint);

-- name: job_prune
-- One batch of one terminal state, oldest first, served by
-- drover_jobs_finalized_idx. The cutoff is on the database clock.
WITH doomed AS (
    SELECT id
    FROM drover_jobs
    WHERE state = %(state)s::drover_job_state
      AND finalized_at IS NOT NULL
      AND finalized_at < now() - make_interval(secs => %(older_than)s)
    ORDER BY state, finalized_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM drover_jobs j
USING doomed
WHERE j.id = doomed.id;
