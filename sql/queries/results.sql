-- Job results (ADR 0028): what Client.result reads and the flag it sets
-- before it waits.

-- name: job_mark_awaited
-- Ask the writer of this job's terminal state to notify drover_done. Run
-- after the waiter's LISTEN is active and before it reads the state: a
-- terminal write that committed before this statement is seen by the read
-- that follows; one that commits after it sees the flag (the row lock
-- orders the two) and notifies. A job already terminal, or already
-- awaited, is not written.
--
-- While this update holds the row, a claim skips it (SKIP LOCKED) and, if
-- it found nothing else, its worker sleeps until its next poll: a job
-- inserted and awaited at once waited a whole poll interval. So a job that
-- is claimable wakes its queue's workers again at commit.
UPDATE drover_jobs SET awaited = true
WHERE id = %(id)s AND NOT awaited AND state NOT IN ({{states:terminal}})
RETURNING (CASE WHEN state IN ({{states:waiting}}) AND scheduled_at <= now()
                THEN pg_notify('drover', queue) END) IS NULL AS quiet;

-- name: job_result
-- A job's state, stored result and last error message.
SELECT state::text, result::text, errors -> -1 ->> 'error'
FROM drover_jobs
WHERE id = %(id)s;
