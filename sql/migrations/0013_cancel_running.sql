-- Cancelling a running job (ADR 0030). An operator's request on a running
-- job: {"reason": text or null, "hard": bool, "grace": seconds,
-- "requested_at": the database's now()}. NULL on every job nobody asked to
-- cancel while it ran. A nullable column without a default adds nothing to
-- existing rows.
--
-- The request does not change the state: the job stays running, its owner
-- is told (NOTIFY drover_cancel, and the heartbeat's answer), and whatever
-- write ends the attempt (completion, failure, snooze, hand-back, rescue)
-- ends it cancelled instead. The operator's redrive of a cancelled job
-- clears it.
ALTER TABLE drover_jobs ADD COLUMN cancel_request jsonb;

-- The errors entry a cancelled attempt gets, in the shape the client writes
-- ({"attempt", "at", "error"}), on the database clock.
CREATE FUNCTION drover_cancel_entry(request jsonb, attempt integer) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'attempt', attempt,
        'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'error', 'drover: job cancelled by operator'
            || COALESCE(': ' || (request ->> 'reason'), '')
    )
$$;
