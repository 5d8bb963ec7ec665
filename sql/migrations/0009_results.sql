-- Job results (ADR 0028). A handler's return value is stored, as JSON, by
-- the fenced write that completes the job, so a stale attempt's result is
-- refused with its completion. NULL: no result (the handler returned None,
-- or the job has not completed). Nullable columns without a default add
-- nothing to existing rows.
ALTER TABLE drover_jobs ADD COLUMN result jsonb;

-- Set by a caller waiting for the job's end (Client.result), before it
-- waits: a write that moves an awaited job to a terminal state returns it,
-- and the client that wrote it notifies channel drover_done after commit.
-- Jobs nobody waits for cost the completion nothing more than reading a
-- column of the row it already updates.
ALTER TABLE drover_jobs ADD COLUMN awaited boolean NOT NULL DEFAULT false;
