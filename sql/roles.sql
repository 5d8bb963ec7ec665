--! The template `drover roles` fills in (lines starting --! are not printed).
--! Producer, worker, reader and schema placeholders in double braces are
--! replaced by checked names (lowercase letters, digits and _), so they need
--! no quoting. Lines ending in the retention mark are printed only with
--! --retention (the default), without the mark; lines ending in the stats
--! mark only with --read-all-stats (the default), likewise.
-- drover least-privilege roles: producer {{producer}}, worker {{worker}},
-- reader {{reader}}, in schema {{schema}}.
--
-- Run this as the role that owns drover's tables (the one that runs
-- `drover migrate`), after migrating. Every statement is idempotent: run it
-- again after each upgrade. The three roles are NOLOGIN groups; grant them to
-- your login roles, e.g. GRANT {{worker}} TO app_worker_login.

BEGIN;

DO $roles$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{{producer}}') THEN
        CREATE ROLE {{producer}} NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{{worker}}') THEN
        CREATE ROLE {{worker}} NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{{reader}}') THEN
        CREATE ROLE {{reader}} NOLOGIN;
    END IF;
END
$roles$;

-- No DDL for anyone but the owner (PostgreSQL 15 and later already default to this).
REVOKE CREATE ON SCHEMA {{schema}} FROM PUBLIC;
GRANT USAGE ON SCHEMA {{schema}} TO {{producer}}, {{worker}}, {{reader}};

-- Start from nothing on drover's objects, so a second run after a narrower
-- template removes what is no longer granted.
REVOKE ALL ON {{schema}}.drover_jobs, {{schema}}.drover_job_deps, {{schema}}.drover_queues,
    {{schema}}.drover_clients, {{schema}}.drover_limits, {{schema}}.drover_limit_starts,
    {{schema}}.drover_gates, {{schema}}.drover_periodic_ticks, {{schema}}.drover_periodic_leader,
    {{schema}}.drover_periodic_lease, {{schema}}.drover_schema_version,
    {{schema}}.drover_health_samples
    FROM {{producer}}, {{worker}}, {{reader}};
REVOKE ALL ON SEQUENCE {{schema}}.drover_jobs_id_seq, {{schema}}.drover_limits_id_seq
    FROM {{producer}}, {{worker}}, {{reader}};

-- Every client reads the schema version at start.
GRANT SELECT ON {{schema}}.drover_schema_version TO {{producer}}, {{worker}}, {{reader}};

-- Producer: insert jobs (one, many by COPY, in your transaction, unique,
-- debounced, throttled, workflows). The column UPDATEs are what an insert
-- writes to rows already there: a dependency's has_dependents (depends_on),
-- a holder's unique_states when it hands a unique identity on, and the fields
-- a debounced insert refreshes on the waiting job it replaces, and awaited,
-- the flag Client.result sets so that the job's end notifies the waiter
-- (results.sql). Not granted: attempt, leased_until, leased_by, errors,
-- result, finalized_at, so the claim, completion and every worker-side
-- write are refused.
GRANT SELECT, INSERT ON {{schema}}.drover_jobs TO {{producer}};
GRANT UPDATE (has_dependents, unique_states, args, scheduled_at, state, max_attempts, priority,
    tags, meta, awaited) ON {{schema}}.drover_jobs TO {{producer}};
GRANT SELECT, INSERT ON {{schema}}.drover_job_deps TO {{producer}};
GRANT USAGE ON SEQUENCE {{schema}}.drover_jobs_id_seq TO {{producer}};

-- Worker: claim, heartbeat, complete, retry, snooze, rescue, results,
-- progress, cancel requests, dependency release, limits, the clients
-- registry, periodic ticks, and inserting jobs from handlers. No DELETE on
-- drover_jobs unless this worker runs retention.
GRANT SELECT, INSERT, UPDATE ON {{schema}}.drover_jobs TO {{worker}};
GRANT DELETE ON {{schema}}.drover_jobs TO {{worker}}; -- retention
GRANT SELECT, INSERT ON {{schema}}.drover_job_deps TO {{worker}};
GRANT SELECT ON {{schema}}.drover_queues TO {{worker}};
GRANT SELECT, INSERT, UPDATE, DELETE ON {{schema}}.drover_clients TO {{worker}};
-- A client's refresh writes the minute's health sample and deletes old ones.
GRANT SELECT, INSERT, DELETE ON {{schema}}.drover_health_samples TO {{worker}};
GRANT SELECT, INSERT, UPDATE ON {{schema}}.drover_limits TO {{worker}};
GRANT SELECT, INSERT, UPDATE, DELETE ON {{schema}}.drover_limit_starts TO {{worker}};
-- The claim reads the gates; a write of drover_limits rebuilds the limits'
-- gates in the writer's transaction (a trigger that locks drover_gates, then
-- deletes and inserts rows).
GRANT SELECT, INSERT, DELETE ON {{schema}}.drover_gates TO {{worker}};
GRANT SELECT, INSERT, UPDATE ON {{schema}}.drover_periodic_ticks TO {{worker}};
GRANT SELECT, INSERT, UPDATE ON {{schema}}.drover_periodic_leader TO {{worker}};
GRANT SELECT, INSERT, UPDATE, DELETE ON {{schema}}.drover_periodic_lease TO {{worker}};
GRANT USAGE ON SEQUENCE {{schema}}.drover_jobs_id_seq, {{schema}}.drover_limits_id_seq
    TO {{worker}};

-- Reader: `drover stats`, `drover jobs list/get`, the status page with
-- --read-only. Nothing it can write.
GRANT SELECT ON {{schema}}.drover_jobs, {{schema}}.drover_job_deps, {{schema}}.drover_queues,
    {{schema}}.drover_clients, {{schema}}.drover_limits, {{schema}}.drover_limit_starts,
    {{schema}}.drover_gates, {{schema}}.drover_periodic_ticks, {{schema}}.drover_periodic_leader,
    {{schema}}.drover_periodic_lease, {{schema}}.drover_health_samples TO {{reader}};

-- The queue doctor (`drover doctor`, every worker's health probe, the status -- stats
-- page's Health) names the sessions holding back vacuum from pg_stat_activity, -- stats
-- which shows a role other roles' transactions only with the privileges of -- stats
-- pg_read_all_stats. Granting a predefined role takes a superuser (or its -- stats
-- ADMIN OPTION): without either this warns and the rest still applies, and -- stats
-- the doctor reports CANNOT_SEE_SESSIONS until an administrator grants it. -- stats
DO $stats$ -- stats
BEGIN -- stats
    GRANT pg_read_all_stats TO {{worker}}, {{reader}}; -- stats
EXCEPTION WHEN insufficient_privilege THEN -- stats
    RAISE WARNING 'drover roles: role % may not grant pg_read_all_stats; have a superuser run: GRANT pg_read_all_stats TO {{worker}}, {{reader}}; until then drover doctor reports CANNOT_SEE_SESSIONS', current_user; -- stats
END -- stats
$stats$; -- stats

-- drover's functions run with the caller's rights (SECURITY INVOKER), so the
-- table grants above are what they may touch. PostgreSQL grants EXECUTE to
-- PUBLIC by default; these make the intent explicit.
GRANT EXECUTE ON FUNCTION
    {{schema}}.drover_claim_limited(text, integer, double precision, text),
    {{schema}}.drover_take_start(bigint, integer),
    {{schema}}.drover_release_dependents(bigint[]),
    {{schema}}.drover_cancel_dependents(bigint[], text[]),
    {{schema}}.drover_cancel_entry(jsonb, integer),
    {{schema}}.drover_ledger_push(jsonb, jsonb),
    {{schema}}.drover_state_bit({{schema}}.drover_job_state),
    {{schema}}.drover_watched({{schema}}.drover_jobs),
    {{schema}}.drover_limits_gates()
    TO {{worker}};
GRANT EXECUTE ON FUNCTION
    {{schema}}.drover_insert_unique(jsonb, boolean),
    {{schema}}.drover_state_bit({{schema}}.drover_job_state)
    TO {{producer}}, {{worker}};

COMMIT;
