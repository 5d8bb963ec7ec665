-- An operator's cancel of one job, whatever its state (ADR 0030). Conditioned
-- on the state it starts from, never fenced on an attempt (see inspect.sql).

-- name: job_cancel_or_request
-- One statement, two branches, of which at most one matches the row:
--
-- * a pending, waiting or dead job is cancelled at once, as job_cancel does
--   (no errors entry; its pending dependents are cancelled with it; a caller
--   awaiting it is told at commit);
-- * a running job keeps running: the request is written to cancel_request
--   (reason, hard, grace, requested_at on the database clock; a repeated
--   request replaces it, so a soft cancel can be made hard) and announced on
--   channel drover_cancel, payload {"id", "attempt", "reason", "hard",
--   "grace"}, delivered at commit to the client holding the claim. The write
--   that ends the attempt ends it cancelled (runtime.sql).
--
-- Returns the job's columns and whether it was a request (still running).
WITH cancelled AS (
    UPDATE drover_jobs
    SET state = 'cancelled', finalized_at = now(), leased_until = NULL
    WHERE id = %(id)s AND state IN ({{states:cancellable}})
    RETURNING {{job_columns}}, has_dependents,
        (CASE WHEN awaited THEN pg_notify('drover_done', id::text) END) IS NULL AS quiet
), requested AS (
    UPDATE drover_jobs
    SET cancel_request = jsonb_build_object(
        'reason', %(reason)s::text,
        'hard', %(hard)s::boolean,
        'grace', %(grace)s::double precision,
        'requested_at', now())
    WHERE id = %(id)s AND state = 'running'
    RETURNING {{job_columns}},
        pg_notify('drover_cancel', json_build_object(
            'id', id, 'attempt', attempt, 'reason', %(reason)s::text,
            'hard', %(hard)s::boolean, 'grace', %(grace)s::double precision)::text) IS NULL
        AS quiet
), dependents AS (
    SELECT drover_cancel_dependents(ARRAY[id], ARRAY['cancelled']) FROM cancelled
    WHERE has_dependents
)
SELECT {{job_columns}}, false FROM cancelled WHERE (SELECT count(*) FROM dependents) >= 0
UNION ALL
SELECT {{job_columns}}, true FROM requested;

-- name: job_cancel_requests
-- The operators' requests to cancel (ADR 0030) of the given (id, attempt)
-- claims that have one: the fallback for a client that missed the
-- notification (not listening, or behind a transaction pooler). A request
-- belongs to the attempt that was running when it was written; a claim that
-- moved on is not answered. Primary-key probes; no row for a claim without
-- a request (the usual answer is no row).
SELECT j.id, j.attempt, j.cancel_request::text
FROM drover_jobs j
JOIN unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS h(id, attempt)
    ON h.id = j.id AND h.attempt = j.attempt
WHERE j.id = ANY (%(ids)s::bigint[])
  AND j.cancel_request IS NOT NULL AND (j.state = 'running') IS TRUE;
