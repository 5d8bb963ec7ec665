-- Queue pause state. The claim query consults drover_queues directly, so a
-- pause takes effect on every client's next claim, within one poll interval.

-- name: queue_pause
INSERT INTO drover_queues (name, paused_at, updated_at)
VALUES (%(name)s, now(), now())
ON CONFLICT (name) DO UPDATE
SET paused_at = COALESCE(drover_queues.paused_at, excluded.paused_at),
    updated_at = now()
RETURNING name, paused_at, updated_at;

-- name: queue_resume
-- Also wakes every listening client working the queue (notify on channel
-- "drover", as an insert does), so jobs that waited during the pause start at
-- once rather than within a poll interval. Delivered when this commits.
WITH resumed AS (
    UPDATE drover_queues
    SET paused_at = NULL, updated_at = now()
    WHERE name = %(name)s AND paused_at IS NOT NULL
    RETURNING name
)
SELECT name, pg_notify('drover', name)::text FROM resumed;

-- name: queue_list
SELECT name, paused_at, updated_at FROM drover_queues ORDER BY name;
