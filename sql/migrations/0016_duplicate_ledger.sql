-- The duplicate ledger (ADR 0037): every re-run of an attempt and every
-- stale write the fence refused, recorded on the job itself, so an operator
-- can answer "did this job run twice, and why" from the job alone.
--
-- A JSON array of entries, oldest first, NULL on every job that never had
-- one (the usual job: the normal claim and completion never touch the
-- column). Only the rare paths write it: the rescuer, a shutdown's
-- hand-back, and a worker whose write the fence refused. A nullable column
-- without a default rewrites nothing, and it is deleted with its job.
ALTER TABLE drover_jobs ADD COLUMN ledger jsonb;

-- Append entries (a JSON array) to a ledger, keeping only the last 50: a job
-- rescued over and over cannot grow its row without bound. Each entry gets
-- "at", the database's now() in the shape the errors entries use.
CREATE FUNCTION drover_ledger_push(ledger jsonb, entries jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN jsonb_array_length(c.all_entries) <= 50 THEN c.all_entries
        ELSE (
            SELECT jsonb_agg(t.e ORDER BY t.n)
            FROM jsonb_array_elements(c.all_entries) WITH ORDINALITY AS t(e, n)
            WHERE t.n > jsonb_array_length(c.all_entries) - 50
        )
    END
    FROM (
        SELECT COALESCE(ledger, '[]'::jsonb) || COALESCE((
            SELECT jsonb_agg(x.e || jsonb_build_object(
                'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                ORDER BY x.n)
            FROM jsonb_array_elements(entries) WITH ORDINALITY AS x(e, n)
        ), '[]'::jsonb) AS all_entries
    ) c
$$;
