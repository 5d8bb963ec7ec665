-- drover's job table: the whole state machine lives in one row per job.
-- States, in this order (a test asserts it): waiting (available, scheduled),
-- running, waiting again after a failure (retryable), and the three terminal
-- states (completed, cancelled, dead).
CREATE TYPE drover_job_state AS ENUM (
    'available',
    'scheduled',
    'running',
    'retryable',
    'completed',
    'cancelled',
    'dead'
);

CREATE TABLE drover_jobs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind         text             NOT NULL,
    queue        text             NOT NULL DEFAULT 'default',
    args         jsonb            NOT NULL DEFAULT '{}',
    state        drover_job_state NOT NULL DEFAULT 'available',
    -- Incremented by every claim; together with id it is the fence token that
    -- every worker-side write must present.
    attempt      integer          NOT NULL DEFAULT 0,
    max_attempts integer          NOT NULL DEFAULT 25,
    errors       jsonb            NOT NULL DEFAULT '[]',
    -- Due time: first run, retry wake-up and snooze wake-up alike.
    scheduled_at timestamptz      NOT NULL DEFAULT now(),
    leased_until timestamptz,
    created_at   timestamptz      NOT NULL DEFAULT now(),
    finalized_at timestamptz,
    unique_key   text
);

-- The claim query, the oldest-age query and the waiting depths.
CREATE INDEX drover_jobs_fetch_v2_idx ON drover_jobs (queue, scheduled_at, id)
    WHERE state IN ('available', 'retryable', 'scheduled');

-- The rescuer's sweep of expired leases and the running depth.
CREATE INDEX drover_jobs_lease_idx ON drover_jobs (leased_until, id)
    WHERE state = 'running';

-- Dead-letter depth per queue without touching the heap.
CREATE INDEX drover_jobs_dead_idx ON drover_jobs (queue, id)
    WHERE state = 'dead';

-- At most one non-terminal job per (queue, kind, unique_key). Inserts name
-- this index as their ON CONFLICT arbiter, so its name and predicate are part
-- of the insert queries' contract.
CREATE UNIQUE INDEX drover_jobs_unique_active_idx ON drover_jobs (queue, kind, unique_key)
    WHERE unique_key IS NOT NULL
      AND state IN ('available', 'scheduled', 'retryable', 'running');
