-- Wake-ups. Inserts notify channel "drover" with the queue name as payload;
-- PostgreSQL delivers a notification at commit and folds identical ones in a
-- transaction into one, so a batch wakes each queue once.

-- name: notify_listen
LISTEN drover;

-- name: notify_unlisten
UNLISTEN drover;

-- name: notify_queues
SELECT pg_notify('drover', q) FROM unnest(%(queues)s::text[]) AS q;
