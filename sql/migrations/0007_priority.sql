-- Job priority: an integer from -100 to 100, higher claimed first, 0 by
-- default. Adding a column with a constant default rewrites nothing (the
-- default is kept in the catalogue, PostgreSQL 11 and later). The range check
-- is added NOT VALID: every existing row holds the default, so there is
-- nothing to scan for; new and updated rows are checked.
ALTER TABLE drover_jobs ADD COLUMN priority smallint NOT NULL DEFAULT 0;
ALTER TABLE drover_jobs ADD CONSTRAINT drover_jobs_priority_range
    CHECK (priority BETWEEN -100 AND 100) NOT VALID;

-- The claim walks the distinct priorities of a queue's waiting jobs from the
-- highest down, and within each one takes the due jobs oldest first (see
-- job_claim), so the fetch index leads with (queue, priority). Ascending: the
-- walk reads it backwards, so it meets each priority at its newest job (not
-- at its oldest, where the entries of jobs just claimed wait for vacuum),
-- and the claim reads each priority forwards. It replaces
-- drover_jobs_fetch_v2_idx, whose (queue, scheduled_at, id) order the claim
-- no longer reads. Built without CONCURRENTLY (migrations run in a
-- transaction): on a large existing table it blocks writes to drover_jobs
-- while it builds (ADR 0024).
CREATE INDEX drover_jobs_fetch_v3_idx ON drover_jobs (queue, priority, scheduled_at, id)
    WHERE state IN ('available', 'retryable', 'scheduled');
DROP INDEX drover_jobs_fetch_v2_idx;
