-- The registry of live clients, for operators: one row per started Client
-- (so one per process under `drover worker --processes N`). The client
-- inserts its row when it starts, refreshes it every heartbeat interval with
-- how many jobs it is running, and deletes it when it stops cleanly. A row
-- carries its own expiry (the client's refresh interval times three, on the
-- database clock); readers ignore expired rows and every client deletes them,
-- so a crashed process disappears without anyone stopping it. Informational
-- only: nothing in the delivery contract reads this table.
CREATE TABLE drover_clients (
    id           text        PRIMARY KEY,
    client_id    text        NOT NULL,
    host         text        NOT NULL,
    pid          integer     NOT NULL,
    version      text        NOT NULL,
    queues       text[]      NOT NULL,
    concurrency  integer     NOT NULL,
    running      integer     NOT NULL DEFAULT 0,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);

-- When a job's current (or last) attempt was claimed: a completed job's run
-- time is finalized_at - attempted_at. Written by the claim; a nullable
-- column without a default rewrites nothing.
ALTER TABLE drover_jobs ADD COLUMN attempted_at timestamptz;
