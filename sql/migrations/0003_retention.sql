-- Retention: finding finished rows old enough to delete without scanning the
-- table, and vacuuming a table whose rows churn constantly.

-- Terminal rows by state and finish time: the pruner deletes the oldest first.
-- Built without CONCURRENTLY (migrations run in a transaction): on a large
-- existing table it blocks writes while it builds.
CREATE INDEX drover_jobs_finalized_idx ON drover_jobs (state, finalized_at)
    WHERE finalized_at IS NOT NULL;

-- Every job is inserted, updated two or more times and eventually deleted, so
-- dead tuples pile up much faster than the defaults (20 % of the table) assume.
-- Vacuum and analyze after about 2 % of the rows changed instead.
ALTER TABLE drover_jobs SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.02
);
