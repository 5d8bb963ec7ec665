-- Job dependencies, part 2 (ADR 0029).
--
-- A job inserted with dependencies that have not completed is 'pending', with
-- pending_deps counting them. The statement that completes a job with
-- dependents (has_dependents) counts it off each dependent, and the last one
-- makes the dependent 'available': release costs O(dependents) in the
-- completing transaction and nothing is ever scanned for. A dependency that
-- ends dead or cancelled cancels its pending dependents, and theirs.
ALTER TABLE drover_jobs ADD COLUMN pending_deps integer NOT NULL DEFAULT 0;
ALTER TABLE drover_jobs ADD COLUMN has_dependents boolean NOT NULL DEFAULT false;
-- The workflow a job belongs to: the id of the workflow's first job, NULL
-- for a job inserted on its own.
ALTER TABLE drover_jobs ADD COLUMN workflow_id bigint;
CREATE INDEX drover_jobs_workflow_idx ON drover_jobs (workflow_id) WHERE workflow_id IS NOT NULL;

-- One row per edge: job_id waits for depends_on. No foreign key on
-- depends_on: retention may delete a completed dependency before its
-- dependents finish. Edges go with the dependent.
CREATE TABLE drover_job_deps (
    job_id     bigint NOT NULL REFERENCES drover_jobs (id) ON DELETE CASCADE,
    depends_on bigint NOT NULL,
    PRIMARY KEY (job_id, depends_on)
);
CREATE INDEX drover_job_deps_depends_on_idx ON drover_job_deps (depends_on);

-- A pending job holds its unique key like any job that has not finished.
CREATE UNIQUE INDEX drover_jobs_unique_active_v2_idx ON drover_jobs (queue, kind, unique_key)
    WHERE unique_key IS NOT NULL
      AND state IN ('pending', 'available', 'scheduled', 'retryable', 'running');
DROP INDEX drover_jobs_unique_active_idx;

-- Count the completed dependencies off their pending dependents; the ones
-- with none left become available (due now, or at their scheduled time if
-- later) and their queues are woken at commit. Called by the completion
-- statements with the ids of completed jobs that have dependents. Each
-- statement here takes a new snapshot (READ COMMITTED, a VOLATILE function),
-- so it sees the edges of a dependent whose insert committed while the
-- calling statement waited for the dependency's row lock (ADR 0029: why no
-- release is lost).
CREATE FUNCTION drover_release_dependents(completed bigint[]) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    released integer;
    woken integer;
BEGIN
    WITH counts AS (
        SELECT e.job_id, count(*)::integer AS n
        FROM drover_job_deps e
        WHERE e.depends_on = ANY (completed)
        GROUP BY e.job_id
    ), moved AS (
        UPDATE drover_jobs j
        SET pending_deps = j.pending_deps - c.n,
            state = CASE WHEN j.pending_deps - c.n <= 0 THEN 'available' ELSE j.state END,
            scheduled_at = CASE
                WHEN j.pending_deps - c.n <= 0 THEN GREATEST(j.scheduled_at, now())
                ELSE j.scheduled_at
            END
        FROM counts c
        WHERE j.id = c.job_id AND j.state = 'pending'
        RETURNING j.queue, j.state
    )
    SELECT count(*) FILTER (WHERE m.state = 'available'),
           -- one wake-up per queue; identical payloads fold into one at commit
           count(pg_notify('drover', m.queue)) FILTER (WHERE m.state = 'available')
    INTO released, woken
    FROM moved m;
    RETURN released;
END;
$$;

-- Cancel the pending dependents of jobs that ended dead or cancelled, and
-- their pending dependents in turn, each with an error naming the dependency
-- that ended and how (ended[i] ended as how[i]). Returns the ids cancelled.
-- Called by the statements that write those states for jobs with dependents.
-- Waiters on the cancelled jobs (Client.result) are told at commit.
CREATE FUNCTION drover_cancel_dependents(ended bigint[], how text[]) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    frontier bigint[] := ended;
    frontier_how text[] := how;
    cancelled bigint[] := '{}';
    step bigint[];
BEGIN
    LOOP
        WITH cause AS (
            SELECT f.id, f.how FROM unnest(frontier, frontier_how) AS f(id, how)
        ), first_cause AS (
            SELECT DISTINCT ON (e.job_id) e.job_id, c.id AS dep, c.how
            FROM drover_job_deps e
            JOIN cause c ON c.id = e.depends_on
            WHERE e.depends_on = ANY (frontier)
            ORDER BY e.job_id, c.id
        ), hit AS (
            UPDATE drover_jobs j
            SET state = 'cancelled',
                finalized_at = now(),
                pending_deps = 0,
                errors = j.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', j.attempt,
                    'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                    'error', 'dependency ' || d.dep || ' ended ' || d.how
                        || ', so this job will not run'))
            FROM first_cause d
            WHERE j.id = d.job_id AND j.state = 'pending'
            RETURNING j.id,
                (CASE WHEN j.awaited THEN pg_notify('drover_done', j.id::text) END) IS NULL AS quiet
        )
        SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO step FROM hit;
        EXIT WHEN cardinality(step) = 0;
        cancelled := cancelled || step;
        frontier := step;
        frontier_how := array_fill('cancelled'::text, ARRAY[cardinality(step)]);
    END LOOP;
    RETURN cancelled;
END;
$$;
