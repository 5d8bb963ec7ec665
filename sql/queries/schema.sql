-- Bookkeeping for drover.migrate(). Every statement here runs inside the
-- migration transaction, after the advisory lock is held.

-- name: schema_lock
-- Transaction-level, so it is released by COMMIT/ROLLBACK even if the process
-- dies; concurrent migrators queue here instead of racing on CREATE TYPE.
-- The key is "drover" in ASCII followed by 0x0002.
SELECT pg_advisory_xact_lock(7237970105436602370);

-- name: schema_version_table
CREATE TABLE IF NOT EXISTS drover_schema_version (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: schema_version_exists
SELECT to_regclass('drover_schema_version') IS NOT NULL;

-- name: schema_versions
SELECT version, name, applied_at FROM drover_schema_version ORDER BY version;

-- name: schema_version_record
INSERT INTO drover_schema_version (version, name) VALUES (%(version)s, %(name)s);
