-- Periodic jobs: one row per periodic id, written by the leading client.
-- fired_through is the watermark: every fire time at or before it has been
-- enqueued (or deliberately folded into one late tick). A tick is inserted in
-- the same transaction that moves the watermark past its fire time, and only
-- if the watermark was still before it, so a second client that wrongly
-- believes it leads (a split brain) cannot insert a tick again, even after the
-- first tick's job has finished and released its unique key.
CREATE TABLE drover_periodic_ticks (
    id            text        PRIMARY KEY,
    schedule      text        NOT NULL,
    timezone      text        NOT NULL,
    kind          text        NOT NULL,
    queue         text        NOT NULL,
    fired_through timestamptz NOT NULL,
    last_fire     timestamptz,
    last_job_id   bigint,
    next_fire     timestamptz,
    defined_by    text        NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Who leads, for operators. The truth is the session advisory lock; this row
-- names its holder, and readers check the lock is still held by that backend.
CREATE TABLE drover_periodic_leader (
    singleton   boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    client_id   text        NOT NULL,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    backend_pid integer     NOT NULL,
    since       timestamptz NOT NULL DEFAULT now()
);
