-- Read-only counts for progress displays and (later) the Inspector.

-- name: job_counts_by_state
SELECT queue, state::text, count(*)
FROM drover_jobs
GROUP BY queue, state
ORDER BY queue, state;
