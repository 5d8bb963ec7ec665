-- Per-queue switches shared by every client. A queue needs no row to exist:
-- rows appear when an operator pauses a queue, and stay (resumed) afterwards
-- so the pause history is visible.
CREATE TABLE drover_queues (
    name       text        PRIMARY KEY,
    paused_at  timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
