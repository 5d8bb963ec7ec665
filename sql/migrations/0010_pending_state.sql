-- Job dependencies, part 1 (ADR 0029): the state of a job that waits for
-- other jobs to complete. Its own migration because a new enum value cannot
-- be used in the transaction that adds it; 0011 uses it. First in the enum's
-- order: a pending job comes before it is available.
ALTER TYPE drover_job_state ADD VALUE IF NOT EXISTS 'pending' BEFORE 'available';
