-- The duplicate ledger (migration 0016, ADR 0037): appends on the rare paths
-- only (rescue, hand-back, a refused stale write) and the read for operators.
-- Nothing on the normal claim -> complete path runs any of these.

-- name: job_ledger_append
-- Append entries to the ledgers of some jobs: one JSON array of entries per
-- id (the caller groups them), each stamped with the database clock. Not
-- fenced: the entries describe a claim that is no longer current. A row
-- another transaction holds locked (its new owner's complete_tx, not yet
-- committed) is skipped rather than waited for, so a worker recording its
-- refused write never stalls on someone else's open transaction; the ids
-- written come back, and the caller logs the entries it could not record.
-- A transaction that already holds the rows (the rescue) is never skipped:
-- its own locks do not conflict.
WITH input AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(entries)s::jsonb[]) AS t(id, entries)
)
UPDATE drover_jobs j
-- An entry without a worker (the rescuer's) names the row's lease holder:
-- the worker whose claim set the rescued attempt (migration 0005).
SET ledger = drover_ledger_push(j.ledger, (
    SELECT jsonb_agg(
        CASE WHEN x.e ? 'worker' THEN x.e
             ELSE x.e || jsonb_build_object('worker', j.leased_by) END
        ORDER BY x.n)
    FROM jsonb_array_elements(i.entries) WITH ORDINALITY AS x(e, n)
))
FROM input i
WHERE j.id = i.id
  AND j.id = ANY (ARRAY(
      SELECT c.id FROM drover_jobs c
      WHERE c.id = ANY (%(ids)s::bigint[])
      FOR NO KEY UPDATE OF c SKIP LOCKED
  ))
RETURNING j.id;

-- name: job_get_with_ledger
-- One job and its ledger (Inspector.get_job): the job's columns, then the
-- ledger as text (NULL: no entry ever), then a pending cancel request
-- (ADR 0030; NULL: none).
SELECT {{job_columns}}, ledger::text, cancel_request::text
FROM drover_jobs
WHERE id = %(id)s;
