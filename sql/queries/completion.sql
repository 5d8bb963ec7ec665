-- The features' completion (ADR 0045): the statements that end a job some
-- feature watches (drover_watched, migration 0018), with every branch the
-- kernel's completion (kernel.sql) leaves out. drover._db.completion runs
-- them for claims the kernel's statement refused while the row was still
-- running with the claim's attempt, and for outcomes that carry a result.
-- The fence is the kernel's: (id, attempt, state = 'running').
--
-- The branches: an operator's cancel request (ADR 0030) ends the attempt
-- cancelled; a result (ADR 0028) is stored; a caller awaiting the job is
-- told on channel drover_done; dependents (ADR 0029) are released or
-- cancelled. Each costs nothing for a row that does not need it, but none
-- of it runs when no feature is in use: the kernel's statements finish
-- those jobs.

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
    -- By primary key, never through the partial lease index (see job_complete in kernel.sql).
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
-- The features' plain completion: a batch of completions (of watched jobs,
-- or with results) from the completer, and Job.complete_tx's single claim in
-- the caller's transaction when the kernel's job_complete refused it or it
-- carries a result. The same fence and the same column changes as
-- job_record_outcomes, with two integer arrays in and the refused claims out.
-- The caller looks up why (rare) with job_current_states.
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

