-- The queue doctor (ADR 0035): read-only questions about what hurts a
-- PostgreSQL queue. Every age is the database clock. The horizon questions
-- read the server's own views and only what pins vacuum in this database
-- (or the whole cluster, for physical replication).

-- name: health_horizon_backends
-- Sessions holding an xmin (a snapshot, or an xid of their own) older than the threshold: an open transaction
-- (idle in transaction, or one long query) keeps every row version deleted
-- after it started, so vacuum cannot reclaim the queue's dead jobs. Our own
-- session is left out; the query text is never read (it may carry data).
SELECT a.pid, COALESCE(a.application_name, ''), COALESCE(a.state, ''),
       COALESCE(a.backend_type, ''), COALESCE(a.usename::text, ''),
       EXTRACT(EPOCH FROM now() - COALESCE(a.xact_start, a.backend_start))::float8,
       CASE WHEN a.state = 'active'
            THEN EXTRACT(EPOCH FROM now() - a.query_start)::float8 END,
       age(COALESCE(a.backend_xmin, a.backend_xid))::bigint
FROM pg_stat_activity a
WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
  AND a.pid <> pg_backend_pid()
  AND (a.datname = current_database() OR a.datid IS NULL)
  AND COALESCE(a.xact_start, a.backend_start) <= now() - make_interval(secs => %(min_age_seconds)s)
ORDER BY COALESCE(a.xact_start, a.backend_start), a.pid;

-- name: health_session_visibility
-- Whether the doctor sees every session it asks about. pg_stat_activity
-- shows a role the state, the start times and the query of its own roles'
-- sessions only, unless it has the privileges of pg_read_all_stats (a
-- superuser has): another role's session idle in transaction then has no
-- xact_start, and health_horizon_backends cannot name it (ADR 0054). Its
-- xid and xmin are shown to every role, so the hidden client sessions of
-- this database that hold one are counted, with the oldest one's age in
-- transactions. Background processes (no role) are left out.
SELECT current_user::text, pg_has_role('pg_read_all_stats', 'USAGE'),
       count(a.pid)::bigint,
       count(a.pid) FILTER (WHERE a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)::bigint,
       max(age(COALESCE(a.backend_xmin, a.backend_xid)))::bigint
FROM (SELECT pg_has_role('pg_read_all_stats', 'USAGE') AS sees_all) v
LEFT JOIN pg_stat_activity a
  ON NOT v.sees_all
 AND a.pid <> pg_backend_pid()
 AND (a.datname = current_database() OR a.datid IS NULL)
 AND a.usesysid IS NOT NULL
 AND a.usesysid NOT IN (SELECT r.oid FROM pg_roles r WHERE pg_has_role(r.oid, 'USAGE'));

-- name: health_horizon_slots
-- Replication slots of this database (logical) or the cluster (physical):
-- one with xmin or catalog_xmin pins vacuum while it exists, active or not;
-- an inactive one also keeps WAL from being recycled.
SELECT s.slot_name::text, s.slot_type, COALESCE(s.database::text, ''), s.active,
       CASE WHEN s.xmin IS NULL THEN NULL ELSE age(s.xmin)::bigint END,
       CASE WHEN s.catalog_xmin IS NULL THEN NULL ELSE age(s.catalog_xmin)::bigint END,
       CASE WHEN s.restart_lsn IS NULL OR pg_is_in_recovery() THEN NULL
            ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint END
FROM pg_replication_slots s
WHERE s.database IS NULL OR s.database = current_database()
ORDER BY s.slot_name;

-- name: health_horizon_prepared
-- Prepared (two-phase) transactions older than the threshold: they hold
-- their xmin until COMMIT PREPARED or ROLLBACK PREPARED, surviving restarts.
SELECT p.gid, COALESCE(p.owner::text, ''),
       EXTRACT(EPOCH FROM now() - p.prepared)::float8, age(p.transaction)::bigint
FROM pg_prepared_xacts p
WHERE p.database = current_database()
  AND p.prepared <= now() - make_interval(secs => %(min_age_seconds)s)
ORDER BY p.prepared;

-- name: health_tables
-- Dead tuples, size and last vacuum of drover's tables as the statistics
-- collector last saw them.
SELECT t.relname::text, t.n_live_tup::bigint, t.n_dead_tup::bigint,
       pg_total_relation_size(t.relid)::bigint,
       GREATEST(t.last_autovacuum, t.last_vacuum),
       t.autovacuum_count::bigint
FROM pg_stat_user_tables t
WHERE t.relname LIKE 'drover\_%%'
  AND CASE WHEN %(schema)s::text IS NULL THEN pg_table_is_visible(t.relid)
           ELSE t.schemaname = %(schema)s END
ORDER BY t.relname;

-- name: health_expired_leases
-- Running jobs whose lease passed more than the grace ago: a rescuer sweeping
-- would have re-leased them, so no started client is rescuing. Per queue, the
-- oldest expiry and a few ids. Served by the running partial index.
SELECT j.queue, count(*)::bigint,
       EXTRACT(EPOCH FROM now() - min(j.leased_until))::float8,
       (array_agg(j.id ORDER BY j.leased_until, j.id))[1:5]
FROM drover_jobs j
WHERE j.state = 'running'
  AND j.leased_until <= now() - make_interval(secs => %(grace_seconds)s)
GROUP BY j.queue
ORDER BY j.queue;

-- name: health_unserved_queues
-- Queues with a job claimable for longer than the grace, not paused, and no
-- live client (an unexpired registry row) claiming from them.
SELECT j.queue, count(*)::bigint, EXTRACT(EPOCH FROM now() - min(j.scheduled_at))::float8
FROM drover_jobs j
WHERE j.state IN ({{states:waiting}})
  AND j.scheduled_at <= now() - make_interval(secs => %(grace_seconds)s)
  AND NOT EXISTS (
      SELECT 1 FROM drover_queues q WHERE q.name = j.queue AND q.paused_at IS NOT NULL
  )
  AND NOT EXISTS (
      SELECT 1 FROM drover_clients c WHERE c.expires_at >= now() AND j.queue = ANY (c.queues)
  )
GROUP BY j.queue
ORDER BY j.queue;

-- name: health_periodic
-- How many periodic entries exist, whether a backend holds the leadership
-- lock (or a client the lease row, ADR 0040), and how long ago the most
-- overdue recorded next fire time passed.
SELECT (SELECT count(*) FROM drover_periodic_ticks)::bigint,
       EXISTS (
           SELECT 1 FROM pg_locks k
           WHERE k.locktype = 'advisory' AND k.granted
             AND k.classid = 1685221238::oid
             AND k.objid = ('drover_periodic_ticks'::regclass::oid::bigint % 2147483647)::oid
             AND k.objsubid = 2
       ) OR EXISTS (
           -- a leader behind a transaction pooler holds a lease row instead (ADR 0040)
           SELECT 1 FROM drover_periodic_lease e WHERE e.leased_until > now()
       ),
       (SELECT EXTRACT(EPOCH FROM now() - min(t.next_fire))::float8
        FROM drover_periodic_ticks t WHERE t.next_fire <= now());

-- name: health_client_claims
-- The live clients' claims over their last refresh windows (ADR 0060), for
-- the clients that claimed at all; a client of a release before claim
-- timing writes no figures and is left out.
SELECT c.client_id || ' (pid ' || c.pid || ' on ' || c.host || ')', c.claims,
       c.claim_p50_seconds, c.claim_p99_seconds, c.claim_max_seconds, c.walk_max_seconds
FROM drover_clients c
WHERE c.expires_at >= now() AND c.claims > 0 AND c.claim_p99_seconds IS NOT NULL
ORDER BY c.claim_p99_seconds DESC, c.id;
