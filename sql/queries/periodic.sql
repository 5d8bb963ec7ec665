-- Periodic jobs: leadership and ticks. Leadership is a session advisory lock
-- held on a dedicated connection; its two keys are "drov" and a number drawn
-- from the oid of drover_periodic_ticks, so each drover schema (each set of
-- drover tables) has its own leader. Losing the connection loses the lock.

-- name: periodic_try_lock
SELECT pg_try_advisory_lock(
    1685221238,
    ('drover_periodic_ticks'::regclass::oid::bigint % 2147483647)::integer
);

-- name: periodic_now
-- The leader's liveness check and its clock: fire times are decided on the
-- database clock, so clients with skewed clocks agree.
SELECT now();

-- name: periodic_leader_record
INSERT INTO drover_periodic_leader (client_id, host, pid, backend_pid, since)
VALUES (%(client_id)s, %(host)s, %(pid)s, pg_backend_pid(), now())
ON CONFLICT (singleton) DO UPDATE
SET client_id = excluded.client_id, host = excluded.host, pid = excluded.pid,
    backend_pid = excluded.backend_pid, since = excluded.since;

-- name: periodic_define
-- Register one entry as the new leader knows it. A new id starts from now:
-- ticks before its first leadership are never replayed. An existing id keeps
-- its watermark, so a tick that fell due while no client led fires once.
INSERT INTO drover_periodic_ticks (id, schedule, timezone, kind, queue, fired_through, defined_by)
VALUES (%(id)s, %(schedule)s, %(timezone)s, %(kind)s, %(queue)s, now(), %(client_id)s)
ON CONFLICT (id) DO UPDATE
SET schedule = excluded.schedule, timezone = excluded.timezone, kind = excluded.kind,
    queue = excluded.queue, defined_by = excluded.defined_by, updated_at = now()
RETURNING fired_through;

-- name: periodic_tick_claim
-- Move the watermark from before the fire time to upto (>= the fire time).
-- No row back: the fire time is already accounted for (another leader fired
-- it, or folded it into a late tick); the current watermark comes back instead.
WITH claimed AS (
    UPDATE drover_periodic_ticks
    SET fired_through = %(upto)s, updated_at = now()
    WHERE id = %(id)s AND fired_through < %(fire)s
    RETURNING fired_through
)
SELECT true, fired_through FROM claimed
UNION ALL
SELECT false, fired_through FROM drover_periodic_ticks
WHERE id = %(id)s AND NOT EXISTS (SELECT 1 FROM claimed);

-- name: periodic_tick_record
UPDATE drover_periodic_ticks
SET last_fire = %(fire)s, last_job_id = %(job_id)s, next_fire = %(next_fire)s, updated_at = now()
WHERE id = %(id)s;

-- name: periodic_next_record
UPDATE drover_periodic_ticks SET next_fire = %(next_fire)s WHERE id = %(id)s;

-- name: periodic_lease_hold
-- Leadership by lease row (ADR 0040): take the lease if it is free or
-- expired, or extend it if this holder has it; a row back (the database
-- clock) means this holder leads until leased_until. While a backend holds
-- the advisory lock (a client with a session leads) nobody takes the lease.
INSERT INTO drover_periodic_lease AS l (holder, leased_until)
SELECT %(holder)s, now() + make_interval(secs => %(ttl)s)
WHERE NOT EXISTS (
    SELECT 1 FROM pg_locks k
    WHERE k.locktype = 'advisory' AND k.granted
      AND k.classid = 1685221238::oid
      AND k.objid = ('drover_periodic_ticks'::regclass::oid::bigint %% 2147483647)::oid
      AND k.objsubid = 2
)
ON CONFLICT (singleton) DO UPDATE
SET holder = excluded.holder, leased_until = excluded.leased_until,
    since = CASE WHEN l.holder = excluded.holder THEN l.since ELSE now() END
WHERE l.holder = excluded.holder OR l.leased_until <= now()
RETURNING now();

-- name: periodic_lease_release
-- A leader that stops hands the lease over at once.
DELETE FROM drover_periodic_lease WHERE holder = %(holder)s;

-- name: periodic_list
-- Every entry with the client leading now (if the lock is still held by the
-- backend the leader row names, or the lease row names it and has not expired).
SELECT t.id, t.schedule, t.timezone, t.kind, t.queue, t.fired_through, t.last_fire,
       t.last_job_id, t.next_fire, t.defined_by, l.client_id, l.host, l.pid
FROM drover_periodic_ticks t
LEFT JOIN drover_periodic_leader l ON EXISTS (
    SELECT 1 FROM pg_locks k
    WHERE k.locktype = 'advisory' AND k.granted AND k.pid = l.backend_pid
      AND k.classid = 1685221238::oid
      AND k.objid = ('drover_periodic_ticks'::regclass::oid::bigint % 2147483647)::oid
      AND k.objsubid = 2
) OR EXISTS (
    SELECT 1 FROM drover_periodic_lease e
    WHERE e.holder = l.client_id AND e.leased_until > now()
)
ORDER BY t.id;

-- name: periodic_lock_holders
-- Backends holding the leadership lock (tests and diagnostics): 0 or 1.
SELECT k.pid
FROM pg_locks k
WHERE k.locktype = 'advisory' AND k.granted
  AND k.classid = 1685221238::oid
  AND k.objid = ('drover_periodic_ticks'::regclass::oid::bigint % 2147483647)::oid
  AND k.objsubid = 2;
