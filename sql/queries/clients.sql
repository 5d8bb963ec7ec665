-- The registry of live clients (drover_clients, migration 0006): what a
-- started client writes about itself, and what operators read. Every time is
-- the database clock; clients send durations, never instants.

-- name: client_refresh
-- Register or refresh this client's row and delete every other client's
-- expired row, in one round trip. An upsert, not an update: a client whose
-- row was reaped while it could not reach the database (or that registers
-- for the first time) inserts it again, keeping the start time it was first
-- given (%(started_at)s, NULL on the first call). Returns the row's start
-- time and how many expired rows were deleted.
--
-- Own row first, then the others', skipping rows another transaction holds:
-- after a database restart every client's row has expired, and two clients
-- each deleting the other's row while upserting their own deadlocked. The
-- reap reads the upsert's result, which makes the upsert run first; a row
-- skipped now is reaped by a later refresh (or was just refreshed).
WITH upserted AS (
    INSERT INTO drover_clients AS c (
        id, client_id, host, pid, version, queues, concurrency, running,
        started_at, heartbeat_at, expires_at
    )
    VALUES (
        %(id)s, %(client_id)s, %(host)s, %(pid)s, %(version)s, %(queues)s::text[],
        %(concurrency)s, %(running)s, COALESCE(%(started_at)s::timestamptz, now()), now(),
        now() + make_interval(secs => %(ttl_seconds)s)
    )
    ON CONFLICT (id) DO UPDATE
    SET running = EXCLUDED.running,
        heartbeat_at = now(),
        expires_at = EXCLUDED.expires_at
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
       heartbeat_at, expires_at, EXTRACT(EPOCH FROM now() - heartbeat_at)::float8
FROM drover_clients
WHERE expires_at >= now()
ORDER BY started_at, host, pid, client_id;
