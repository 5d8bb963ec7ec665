-- Inserts with a unique identity, debounce or throttle (ADR 0031). The work
-- is drover_insert_unique in migration 0014: it takes the items as one JSON
-- array and inserts them one after another, each in statements of its own
-- snapshot, so an item that lost a race reads the job that won it.

-- name: job_insert_unique
-- Positional parameters: the items (see drover_insert_unique), notify. One
-- row per item, in input order: whether an existing job was returned, then
-- the job's columns (all NULL for a plain item whose unique_key was taken).
SELECT u.duplicate, {{job_columns:j}}
FROM drover_insert_unique(%s::jsonb, %s::boolean) u
CROSS JOIN LATERAL (SELECT (u.job).*) j
ORDER BY u.ord;

-- name: job_insert_unique_begin
-- Run first in a caller's transaction that may not have run a statement yet,
-- so that the batch's nested transaction is a savepoint, not the outermost.
SELECT 1;
