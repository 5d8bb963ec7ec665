-- Runtime queries of a worker process's shutdown (ADR 0053); see jobs.sql for
-- the conventions.

-- name: job_hold_handed_back
-- Run on a session of its own, in a transaction left open until the process
-- ends, just before the hand-back writes these jobs back to the queue. A
-- FOR KEY SHARE lock does not conflict with the hand-back's own UPDATE (FOR NO
-- KEY UPDATE: no key column changes), and PostgreSQL carries it to the row's
-- new version; every claim locks FOR UPDATE SKIP LOCKED, so it skips these
-- rows until this session ends, with the process. lock_timeout bounds the
-- wait for a row another transaction locks FOR UPDATE (none should).
SELECT id FROM drover_jobs WHERE id = ANY (%(ids)s::bigint[]) ORDER BY id FOR KEY SHARE;
