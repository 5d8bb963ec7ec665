-- The periodic leader's lease row, for clients that cannot hold a session
-- (behind PgBouncer in transaction mode without Config.session_url, ADR 0040).
-- A session advisory lock would stay on whichever server session ran the
-- statement, long after the client moved on; a row lives in the data, and its
-- expiry on the database clock hands leadership over when the holder stops
-- renewing it. The holder renews it every turn (at most one poll_interval
-- apart) and deletes it when it stops. The watermark in drover_periodic_ticks
-- (ADR 0011) still guarantees no fire time is inserted twice, whoever leads.
CREATE TABLE drover_periodic_lease (
    singleton    boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    holder       text        NOT NULL,
    leased_until timestamptz NOT NULL,
    since        timestamptz NOT NULL DEFAULT now()
);
