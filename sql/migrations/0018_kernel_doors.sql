-- The kernel's two doors (ADR 0045): what a feature plugs into so that the
-- kernel's claim and completion (sql/queries/kernel.sql) never name a
-- feature, and cost nothing more when no feature is in use.

-- The completion door. True when some feature keeps state on the job that
-- its end must act on, so the kernel's completion must leave the job to
-- that feature's statement (sql/queries/completion.sql):
--
-- * awaited: a caller waits for the end (Client.result, ADR 0028);
-- * has_dependents: the end releases or cancels other jobs (ADR 0029);
-- * cancel_request: an operator asked to cancel it while it ran (ADR 0030);
-- * result: a stored result (a redriven job's earlier run) that a
--   completion without one must clear, as it always did.
--
-- The kernel's completion is fenced on NOT drover_watched(j) besides the
-- claim; a refused claim still running with the same attempt goes through
-- the feature statement, which handles every branch. A feature added later
-- that must see a job's end replaces this function in its migration
-- (CREATE OR REPLACE, same signature and meaning: "a feature must see this
-- job's end"), and the kernel's statements do not change.
--
-- A function of the row, not a column set by the features' statements:
-- the previous release's statements (ADR 0038: they run against this
-- schema until the roll) set awaited, has_dependents and cancel_request
-- without knowing of a new column, and its producers' graphs, waiters and
-- operators' cancels must still reach today's workers' completions. The
-- function reads the columns those statements write, so every writer, old
-- or new, keeps it right, and nothing is written to keep it. A plain SQL
-- expression of its argument, IMMUTABLE, without settings (so never pinned
-- to a schema): the planner inlines it into the statement as the column
-- tests themselves, read from the row the fence reads anyway.
CREATE FUNCTION drover_watched(j drover_jobs) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT j.awaited OR j.has_dependents OR j.cancel_request IS NOT NULL
        OR j.result IS NOT NULL
$$;

-- The claim door. A queue with a row here is claimed through the claim of
-- the feature named by via, never by the kernel's claim: the kernel's claim
-- probes this table for the queue and for '*' (every queue) and, when it
-- finds a row, claims nothing and says so (a row of NULLs), and the client
-- runs the gate's own claim. Features keep their rows; the table is empty
-- when no feature gates anything, and one primary-key probe of an empty
-- table is what the kernel's claim pays for the door.
CREATE TABLE drover_gates (
    queue text NOT NULL,
    via   text NOT NULL,
    PRIMARY KEY (queue, via)
);

-- Limits (ADR 0025) gate claims through drover_claim_limited: a queue-scope
-- limit gates its queue, any kind-scope limit gates every queue ('*'), as
-- the claim's probe of drover_limits did before. A statement-level trigger
-- keeps the 'limits' gates in step with drover_limits, whoever writes it (a
-- starting client's declarations, an operator's `drover limits set`, a
-- delete, the previous release's statements), in the writer's transaction:
-- a limit holds from every client's next claim after its commit.
--
-- A statement that changed which (scope, target) pairs exist (rows
-- inserted or deleted, a scope or target updated, a truncate) rebuilds the
-- 'limits' gates; one that changed none (a starting client declaring the
-- limits it declared last time, an override, a delete that found nothing)
-- returns at once, taking no lock. The rebuilds are serialised (EXCLUSIVE on
-- drover_gates, which claims, reading it, never wait for), and each reads
-- drover_limits after the lock, in a new snapshot that sees every earlier
-- rebuilder's limits: two concurrent writers (one adding a queue's limit,
-- one deleting that queue's last limit) cannot leave a limited queue
-- ungated. The transition tables (changed, before) hold only the rows the
-- statement wrote.
CREATE FUNCTION drover_limits_gates() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NOT EXISTS (
            (SELECT scope, target FROM changed EXCEPT SELECT scope, target FROM before)
            UNION ALL
            (SELECT scope, target FROM before EXCEPT SELECT scope, target FROM changed)
        ) THEN
            RETURN NULL;
        END IF;
    ELSIF TG_OP <> 'TRUNCATE' THEN
        -- (A separate test: a truncate has no transition table to read.)
        IF NOT EXISTS (SELECT 1 FROM changed) THEN
            RETURN NULL;
        END IF;
    END IF;
    LOCK TABLE drover_gates IN EXCLUSIVE MODE;
    DELETE FROM drover_gates g
    WHERE g.via = 'limits'
      AND NOT EXISTS (
          SELECT 1 FROM drover_limits l
          WHERE (l.scope = 'queue' AND l.target = g.queue)
             OR (l.scope = 'kind' AND g.queue = '*')
      );
    INSERT INTO drover_gates (queue, via)
    SELECT DISTINCT CASE WHEN l.scope = 'queue' THEN l.target ELSE '*' END, 'limits'
    FROM drover_limits l
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;

CREATE TRIGGER drover_limits_gates_insert
AFTER INSERT ON drover_limits REFERENCING NEW TABLE AS changed
FOR EACH STATEMENT EXECUTE FUNCTION drover_limits_gates();

CREATE TRIGGER drover_limits_gates_delete
AFTER DELETE ON drover_limits REFERENCING OLD TABLE AS changed
FOR EACH STATEMENT EXECUTE FUNCTION drover_limits_gates();

CREATE TRIGGER drover_limits_gates_update
AFTER UPDATE ON drover_limits REFERENCING OLD TABLE AS before NEW TABLE AS changed
FOR EACH STATEMENT EXECUTE FUNCTION drover_limits_gates();

CREATE TRIGGER drover_limits_gates_truncate
AFTER TRUNCATE ON drover_limits
FOR EACH STATEMENT EXECUTE FUNCTION drover_limits_gates();

-- The gates of the limits already there.
INSERT INTO drover_gates (queue, via)
SELECT DISTINCT CASE WHEN scope = 'queue' THEN target ELSE '*' END, 'limits'
FROM drover_limits;
