-- Bookkeeping for drover.migrate(). Every statement here runs inside the
-- migration transaction, after the advisory lock is held.

-- name: schema_lock
-- Transaction-level, so it is released by COMMIT/ROLLBACK even if the process
-- dies; concurrent migrators queue here instead of racing on CREATE TYPE.
-- The key is "drover" in ASCII followed by 0x0002 for the default schema,
-- that mixed with the schema's name for another (Namespace.lock_key), so
-- each schema migrates on its own.
SELECT pg_advisory_xact_lock(%(key)s::bigint);

-- name: schema_version_table
CREATE TABLE IF NOT EXISTS drover_schema_version (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: schema_exists
SELECT to_regnamespace(%(schema)s) IS NOT NULL;

-- name: schema_create
-- Only when schema_exists said no: CREATE SCHEMA IF NOT EXISTS would still
-- demand the CREATE privilege on the database. {schema} is filled in with
-- psycopg.sql.Identifier.
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: schema_search_path
-- A migration in a schema of drover's own runs with that schema alone on
-- the search_path (this transaction only), so what it creates lands there.
SELECT set_config('search_path', %(path)s, true);

-- name: schema_pin_functions
-- After each migration in a schema of drover's own: every function drover
-- created there that is not IMMUTABLE resolves names with that schema alone,
-- whatever the caller's search_path (a plpgsql body is planned with the
-- caller's). IMMUTABLE ones read no table and stay inlinable. Run with the
-- schema first on the search_path (schema_search_path).
DO $pin$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = current_schema())
          AND p.proname LIKE 'drover\_%' AND p.provolatile <> 'i'
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I', f, current_schema());
    END LOOP;
END
$pin$;

-- name: schema_version_exists
SELECT to_regclass('drover_schema_version') IS NOT NULL;

-- name: schema_versions
SELECT version, name, applied_at FROM drover_schema_version ORDER BY version;

-- name: schema_version_record
INSERT INTO drover_schema_version (version, name) VALUES (%(version)s, %(name)s);
