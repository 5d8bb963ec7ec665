-- Claim health over time (ADR 0060): how long claims take, as each live
-- client measures them, and once a minute a sample of the jobs table's dead
-- tuples and those claims, so `drover doctor` can say the claim is slowing
-- (and why) and the status page can draw it.
--
-- Online-safe: nullable columns without a default rewrite nothing, and the
-- table is new. The previous release's refresh names none of the columns
-- (its upsert leaves them as they were, NULL for its own rows) and never
-- reads the table.

-- The claims of the client's last refresh window (one heartbeat interval),
-- as its claim sessions timed them: how many, the median and 99th
-- percentile (to a histogram bucket's top, at most 19% high), the slowest,
-- and the slowest walk (a claim reading every priority level from its oldest
-- job, ADR 0059). NULL durations: no claim in the window (or a client of a
-- release before this one).
ALTER TABLE drover_clients
    ADD COLUMN claims bigint,
    ADD COLUMN claim_p50_seconds float8,
    ADD COLUMN claim_p99_seconds float8,
    ADD COLUMN claim_max_seconds float8,
    ADD COLUMN walk_max_seconds float8;

-- One row per minute, written by whichever live client's refresh comes
-- first in that minute (INSERT ... ON CONFLICT DO NOTHING on the minute),
-- which also deletes the rows older than a bound (a week by default). Read
-- by the status page's health charts and Inspector.health_samples;
-- informational only: nothing that runs jobs reads it.
--
-- live_tuples, dead_tuples, total_bytes: drover_jobs as the statistics
-- collector last saw it (pg_stat_user_tables; bytes with its indexes and
-- TOAST). claims .. walk_max_seconds: over the live clients' last windows,
-- claims summed, the median a claims-weighted mean of theirs, the 99th
-- percentile and the maxima the highest of theirs. horizon_xids: the age in
-- transactions of the oldest xmin held in this database (a session, a
-- replication slot or a prepared transaction), NULL when none is.
CREATE TABLE drover_health_samples (
    sampled_at        timestamptz PRIMARY KEY,
    live_tuples       bigint,
    dead_tuples       bigint,
    total_bytes       bigint,
    claims            bigint      NOT NULL DEFAULT 0,
    claim_p50_seconds float8,
    claim_p99_seconds float8,
    claim_max_seconds float8,
    walk_max_seconds  float8,
    horizon_xids      bigint
);
