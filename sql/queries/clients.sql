-- The registry of live clients (drover_clients, migration 0006): what a
-- started client writes about itself, and what operators read. Every time is
-- the database clock; clients send durations, never instants.

-- name: client_refresh
-- Register or refresh this client's row and delete every other client's
-- expired row, in one round trip. An upsert, not an update: a client whose
-- row was reaped while it could not reach the database (or that registers
-- for the first time) inserts it again, keeping the start time it was first
-- given (%(started_at)s, NULL on the first call), and the kinds it has
-- workers for (migration 0021). The claim figures are
-- the client's claims since its last refresh (ADR 0060; NULL durations: no
-- claim). Returns the row's start time and how many expired rows were
-- deleted.
--
-- Own row first, then the others', skipping rows another transaction holds:
-- after a database restart every client's row has expired, and two clients
-- each deleting the other's row while upserting their own deadlocked. The
-- reap reads the upsert's result, which makes the upsert run first; a row
-- skipped now is reaped by a later refresh (or was just refreshed).
WITH upserted AS (
    INSERT INTO drover_clients AS c (
        id, client_id, host, pid, version, queues, concurrency, running,
        started_at, heartbeat_at, expires_at, claims, claim_p50_seconds,
        claim_p99_seconds, claim_max_seconds, walk_max_seconds, kinds
    )
    VALUES (
        %(id)s, %(client_id)s, %(host)s, %(pid)s, %(version)s, %(queues)s::text[],
        %(concurrency)s, %(running)s, COALESCE(%(started_at)s::timestamptz, now()), now(),
        now() + make_interval(secs => %(ttl_seconds)s), %(claims)s,
        %(claim_p50_seconds)s, %(claim_p99_seconds)s, %(claim_max_seconds)s,
        %(walk_max_seconds)s, %(kinds)s::text[]
    )
    ON CONFLICT (id) DO UPDATE
    SET running = EXCLUDED.running,
        heartbeat_at = now(),
        expires_at = EXCLUDED.expires_at,
        claims = EXCLUDED.claims,
        claim_p50_seconds = EXCLUDED.claim_p50_seconds,
        claim_p99_seconds = EXCLUDED.claim_p99_seconds,
        claim_max_seconds = EXCLUDED.claim_max_seconds,
        walk_max_seconds = EXCLUDED.walk_max_seconds,
        kinds = EXCLUDED.kinds
    RETURNING c.started_at
), reaped AS (
    DELETE FROM drover_clients
    WHERE id = ANY (ARRAY(
        SELECT x.id FROM drover_clients x
        WHERE x.expires_at < now() AND x.id <> %(id)s
          AND EXISTS (SELECT 1 FROM upserted)
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING 1
)
SELECT (SELECT started_at FROM upserted), (SELECT count(*) FROM reaped);

-- name: client_unregister
-- A clean stop: the row goes at once instead of expiring.
DELETE FROM drover_clients WHERE id = %(id)s;

-- name: client_list
-- Every live client (its row not expired), oldest first.
SELECT client_id, host, pid, version, queues, concurrency, running, started_at,
       heartbeat_at, expires_at, EXTRACT(EPOCH FROM now() - heartbeat_at)::float8,
       claims, claim_p50_seconds, claim_p99_seconds, claim_max_seconds, walk_max_seconds,
       kinds
FROM drover_clients
WHERE expires_at >= now()
ORDER BY started_at, host, pid, client_id;

-- name: health_sample
-- The minute's health sample (ADR 0060), written by whichever live client's
-- refresh comes first in the minute: the NOT EXISTS skips the statistics'
-- reads once the row is there, and ON CONFLICT settles two clients racing
-- for it. drover_jobs' tuples and bytes from the statistics collector, the
-- live clients' last claim windows, and the oldest xmin held in this
-- database (sessions, replication slots, prepared transactions; a session's
-- xmin is visible to every role). The writer also deletes the samples older
-- than %(keep_seconds)s. Returns whether it wrote the row, and how many it
-- deleted.
WITH sampled AS (
    INSERT INTO drover_health_samples AS s (
        sampled_at, live_tuples, dead_tuples, total_bytes, claims, claim_p50_seconds,
        claim_p99_seconds, claim_max_seconds, walk_max_seconds, horizon_xids
    )
    SELECT date_trunc('minute', now()), t.n_live_tup, t.n_dead_tup,
           pg_total_relation_size('drover_jobs'::regclass),
           COALESCE(k.claims, 0), k.p50, k.p99, k.max, k.walk_max,
           GREATEST(
               (SELECT max(age(COALESCE(a.backend_xmin, a.backend_xid)))
                FROM pg_stat_activity a
                WHERE (a.datname = current_database() OR a.datid IS NULL)
                  AND a.pid <> pg_backend_pid()),
               (SELECT max(GREATEST(age(r.xmin), age(r.catalog_xmin)))
                FROM pg_replication_slots r
                WHERE r.database IS NULL OR r.database = current_database()),
               (SELECT max(age(p.transaction)) FROM pg_prepared_xacts p
                WHERE p.database = current_database())
           )::bigint
    FROM (SELECT 1) one
    LEFT JOIN pg_stat_user_tables t ON t.relid = 'drover_jobs'::regclass
    CROSS JOIN LATERAL (
        SELECT sum(c.claims)::bigint AS claims,
               sum(c.claims * c.claim_p50_seconds) / NULLIF(sum(c.claims), 0) AS p50,
               max(c.claim_p99_seconds) AS p99, max(c.claim_max_seconds) AS max,
               max(c.walk_max_seconds) AS walk_max
        FROM drover_clients c
        WHERE c.expires_at >= now() AND c.claims > 0
    ) k
    WHERE NOT EXISTS (
        SELECT 1 FROM drover_health_samples x WHERE x.sampled_at = date_trunc('minute', now())
    )
    ON CONFLICT (sampled_at) DO NOTHING
    RETURNING s.sampled_at
), pruned AS (
    DELETE FROM drover_health_samples d
    WHERE EXISTS (SELECT 1 FROM sampled)
      AND d.sampled_at < now() - make_interval(secs => %(keep_seconds)s)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM sampled), (SELECT count(*) FROM pruned);

-- name: health_samples_since
-- The health samples from %(since)s on, oldest first (ADR 0060).
SELECT sampled_at, live_tuples, dead_tuples, total_bytes, claims, claim_p50_seconds,
       claim_p99_seconds, claim_max_seconds, walk_max_seconds, horizon_xids
FROM drover_health_samples
WHERE sampled_at >= %(since)s
ORDER BY sampled_at;
