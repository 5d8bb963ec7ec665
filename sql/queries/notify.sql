-- Wake-ups. Inserts notify channel "drover" with the queue name as payload;
-- PostgreSQL delivers a notification at commit and folds identical ones in a
-- transaction into one, so a batch wakes each queue once.

-- name: notify_listen
LISTEN drover;

-- name: notify_listen_cancels
-- The listener's second channel: operators' requests to cancel a running job
-- (payload: JSON naming the job, ADR 0030). Issued before notify_listen.
LISTEN drover_cancel;

-- name: notify_unlisten
UNLISTEN drover;

-- name: notify_queues
SELECT pg_notify('drover', q) FROM unnest(%(queues)s::text[]) AS q;

-- name: notify_queues_now
-- The notifier's own transaction (autocommit, this one statement). NOTIFY
-- makes PostgreSQL assign a transaction id, so its commit is a WAL flush,
-- taken while holding the global notification lock. Nothing here needs to
-- survive a crash, so the transaction turns synchronous_commit off for
-- itself (is_local): the commit returns without waiting for the flush, and
-- listeners are told at once (an asynchronous commit is visible at once).
SELECT set_config('synchronous_commit', 'off', true), pg_notify('drover', q)
FROM unnest(%(queues)s::text[]) AS q;

-- name: notify_ping
-- The listener's health check on an idle LISTEN connection: a half-open TCP
-- connection never errors on its own, so the listener asks and times the answer.
SELECT 1;

-- name: notify_listen_done
-- Client.result's waiter: an awaited job reached a terminal state (payload:
-- its id). Sent by the statement that wrote the state (ADR 0028).
LISTEN drover_done;
