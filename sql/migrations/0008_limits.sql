-- Cluster-wide limits (ADR 0025): at most N jobs of a scope running at once,
-- at most N starts of a scope per period. A scope is a queue or a kind,
-- whole or per value of one top-level args field (partition_by, '' for
-- none). Code declares a limit (written by every client that starts with
-- it); an operator may override it field by field. The claim enforces the
-- effective values, COALESCE(override, declared).
CREATE TABLE drover_limits (
    id                   integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope                text        NOT NULL CHECK (scope IN ('queue', 'kind')),
    target               text        NOT NULL CHECK (target <> ''),
    partition_by         text        NOT NULL DEFAULT '',
    declared_concurrency integer     CHECK (declared_concurrency > 0),
    declared_rate        integer     CHECK (declared_rate > 0),
    declared_per         interval    CHECK (declared_per > interval '0'),
    declared_at          timestamptz,
    override_concurrency integer     CHECK (override_concurrency > 0),
    override_rate        integer     CHECK (override_rate > 0),
    override_per         interval    CHECK (override_per > interval '0'),
    overridden_at        timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (scope, target, partition_by)
);

-- The starts a rate limit counts: one row per claim and partition, with how
-- many jobs that claim started. Rows older than the limit's period are
-- deleted by the claims that read them.
CREATE TABLE drover_limit_starts (
    limit_id   integer     NOT NULL REFERENCES drover_limits (id) ON DELETE CASCADE,
    part       text        NOT NULL,
    started_at timestamptz NOT NULL,
    starts     integer     NOT NULL
);
CREATE INDEX drover_limit_starts_idx ON drover_limit_starts (limit_id, part, started_at);

-- The claim of a queue some limit applies to (job_claim sends the claim
-- here when drover_limits has a row for the queue or for any kind). It runs
-- in the claim's one autocommit transaction:
--
-- 1. Candidates: due jobs of the queue in claim order (priority, due time,
--    id), locked FOR UPDATE SKIP LOCKED as in job_claim, minus those whose
--    budget is known to be spent. Each draws on budgets, one per limit that
--    applies to it, named "<limit id>:<partition>": the partition is the JSON
--    text of the job's args field ('null' when it has none), or '' for a
--    whole scope.
-- 2. The limits the candidates draw on are locked with transaction-level
--    advisory locks, in id order (no two claims wait on each other in a
--    cycle). The lock's keys are drover_limits' oid and the limit's id: each
--    set of drover tables has its own, apart from the periodic leader's.
--    A claim holding a limit's lock is the only one admitting jobs under it
--    until it commits.
-- 3. Each budget is counted after the lock, in a new statement, so with a
--    snapshot that sees every claim committed before the lock was granted:
--    running jobs for a concurrency limit (state = 'running', counted until
--    the rescuer takes an expired lease back), starts within the period for
--    a rate limit.
-- 4. Candidates are admitted in claim order while every budget they draw on
--    has room; a refused candidate is left untouched, available.
-- 5. Up to three rounds: when candidates were refused, the next round looks
--    further down the queue, past every spent budget, so a limited kind at
--    the head of a queue does not hold back the jobs behind it. A later
--    round only tries a lock it does not hold (pg_try_advisory_xact_lock),
--    so it never waits while holding one.
--
-- Budgets are computed by joins over the few limit rows, never by a function
-- call per job: a SQL function call per row cost more than the claim itself.
--
-- Returns each admitted job and whether a concurrency limit applied to it
-- (its outcome then releases capacity, and the client wakes the fetchers).
CREATE FUNCTION drover_claim_limited(
    p_queue text, p_limit integer, p_lease double precision, p_holder text
) RETURNS TABLE (o_job drover_jobs, o_concurrency boolean)
LANGUAGE plpgsql VOLATILE AS $claim$
DECLARE
    -- The limits that can apply to this queue's jobs, in id order.
    l_id integer[];
    l_scope text[];
    l_target text[];
    l_part text[];
    l_conc integer[];
    l_rate integer[];
    l_per interval[];
    has_parts boolean;
    lock_class integer := ('drover_limits'::regclass::oid::bigint % 2147483647)::integer;
    -- Limits this claim holds the lock of (ids).
    held integer[] := '{}';
    -- Budgets counted so far: key, room left. A key of a limit whose lock
    -- could not be taken has no budget entry and admits nothing.
    b_key text[] := '{}';
    b_left integer[] := '{}';
    spent text[] := '{}';
    seen bigint[] := '{}';
    admitted bigint[] := '{}';
    admitted_conc bigint[] := '{}';
    -- Starts to record: key, count.
    s_key text[] := '{}';
    s_count integer[] := '{}';
    -- This round's candidates, in claim order, and their budget keys as
    -- (candidate position, key) pairs sorted by position.
    c_id bigint[];
    c_kind text[];
    c_args jsonb[];
    k_pos integer[];
    k_key text[];
    want integer;
    round integer := 0;
    refused boolean;
    ok boolean;
    is_conc boolean;
    new_locks integer[];
    lid integer;
    pos integer;
    k text;
    ci integer;
    kj integer;
    kfirst integer;
    klast integer;
    r record;
BEGIN
    IF EXISTS (SELECT 1 FROM drover_queues q WHERE q.name = p_queue AND q.paused_at IS NOT NULL) THEN
        RETURN;
    END IF;
    SELECT COALESCE(array_agg(l.id ORDER BY l.id), '{}'),
           COALESCE(array_agg(l.scope ORDER BY l.id), '{}'),
           COALESCE(array_agg(l.target ORDER BY l.id), '{}'),
           COALESCE(array_agg(l.partition_by ORDER BY l.id), '{}'),
           COALESCE(array_agg(COALESCE(l.override_concurrency, l.declared_concurrency)
                              ORDER BY l.id), '{}'),
           COALESCE(array_agg(COALESCE(l.override_rate, l.declared_rate) ORDER BY l.id), '{}'),
           COALESCE(array_agg(COALESCE(l.override_per, l.declared_per, interval '1 second')
                              ORDER BY l.id), '{}'),
           COALESCE(bool_or(l.partition_by <> ''), false)
    INTO l_id, l_scope, l_target, l_part, l_conc, l_rate, l_per, has_parts
    FROM drover_limits l
    WHERE (l.scope = 'kind' OR (l.scope = 'queue' AND l.target = p_queue))
      AND (COALESCE(l.override_concurrency, l.declared_concurrency) IS NOT NULL
           OR COALESCE(l.override_rate, l.declared_rate) IS NOT NULL);

    want := p_limit;
    LOOP
        round := round + 1;
        -- 1. Candidates, in claim order (the walk of job_claim). The args are
        -- read only when a limit is partitioned.
        SELECT COALESCE(array_agg(due.id), '{}'),
               COALESCE(array_agg(due.kind), '{}'),
               COALESCE(array_agg(due.args), '{}')
        INTO c_id, c_kind, c_args
        FROM (
            WITH RECURSIVE levels (priority) AS (
                (
                    SELECT w.priority FROM drover_jobs w
                    WHERE w.state IN ('available', 'retryable', 'scheduled') AND w.queue = p_queue
                    ORDER BY w.priority DESC LIMIT 1
                )
                UNION ALL
                SELECT (
                    SELECT w.priority FROM drover_jobs w
                    WHERE w.state IN ('available', 'retryable', 'scheduled') AND w.queue = p_queue
                      AND w.priority < levels.priority
                    ORDER BY w.priority DESC LIMIT 1
                )
                FROM levels WHERE levels.priority IS NOT NULL
            )
            SELECT pick.id, pick.kind, pick.args
            FROM levels
            CROSS JOIN LATERAL (
                SELECT d.id, d.kind, CASE WHEN has_parts THEN d.args END AS args
                FROM drover_jobs d
                WHERE d.state IN ('available', 'retryable', 'scheduled')
                  AND d.queue = p_queue
                  AND d.priority = levels.priority
                  AND d.scheduled_at <= now()
                  AND (cardinality(seen) = 0 OR d.id <> ALL (seen))
                  AND (cardinality(spent) = 0 OR NOT EXISTS (
                      SELECT 1
                      FROM unnest(l_id, l_scope, l_target, l_part) AS l(id, scope, target, part)
                      WHERE (l.scope = 'queue' OR l.target = d.kind)
                        AND l.id::text || ':' || CASE
                                WHEN l.part = '' THEN ''
                                ELSE COALESCE((d.args -> l.part)::text, 'null')
                            END = ANY (spent)
                  ))
                ORDER BY d.scheduled_at, d.id
                LIMIT want
                FOR UPDATE OF d SKIP LOCKED
            ) pick
            LIMIT want
        ) due;
        EXIT WHEN cardinality(c_id) = 0;
        seen := seen || c_id;

        -- Each candidate's budget keys (the queue's own limits apply to all).
        SELECT COALESCE(array_agg(x.i ORDER BY x.i, x.id), '{}'),
               COALESCE(array_agg(x.key ORDER BY x.i, x.id), '{}')
        INTO k_pos, k_key
        FROM (
            SELECT c.i::integer AS i, l.id,
                   l.id::text || ':' || CASE
                       WHEN l.part = '' THEN ''
                       ELSE COALESCE((c.args -> l.part)::text, 'null')
                   END AS key
            FROM unnest(c_kind, c_args) WITH ORDINALITY AS c(kind, args, i)
            JOIN unnest(l_id, l_scope, l_target, l_part) AS l(id, scope, target, part)
              ON l.scope = 'queue' OR l.target = c.kind
        ) x;

        -- 2. Lock the limits the candidates draw on that this claim does not
        -- hold yet, in id order; wait only in the first round.
        SELECT COALESCE(array_agg(DISTINCT split_part(x, ':', 1)::integer
                                  ORDER BY split_part(x, ':', 1)::integer), '{}')
        INTO new_locks
        FROM unnest(k_key) AS x
        WHERE NOT split_part(x, ':', 1)::integer = ANY (held);
        FOREACH lid IN ARRAY new_locks LOOP
            IF round = 1 THEN
                PERFORM pg_advisory_xact_lock(lock_class, lid);
                held := held || lid;
            ELSIF pg_try_advisory_xact_lock(lock_class, lid) THEN
                held := held || lid;
            END IF;
        END LOOP;

        -- 3. Count the budgets of the limits just locked: every key seen among
        -- running jobs and recent starts (so the spent ones are known), then
        -- the candidates' own keys not seen there, which have the whole limit.
        IF cardinality(new_locks) > 0 THEN
            FOR r IN
                -- Through the partial lease index: running rows only.
                SELECT l.id::text || ':' || CASE
                           WHEN l.part = '' THEN ''
                           ELSE COALESCE((jr.args -> l.part)::text, 'null')
                       END AS key,
                       LEAST(min(l.conc) - count(*)::integer, min(l.rate)) AS room
                FROM unnest(l_id, l_scope, l_target, l_part, l_conc, l_rate)
                    AS l(id, scope, target, part, conc, rate)
                JOIN drover_jobs jr
                  ON jr.state = 'running'
                 AND ((l.scope = 'kind' AND jr.kind = l.target)
                      OR (l.scope = 'queue' AND jr.queue = l.target))
                WHERE l.conc IS NOT NULL AND l.id = ANY (new_locks) AND l.id = ANY (held)
                GROUP BY 1
            LOOP
                b_key := b_key || r.key;
                b_left := b_left || r.room;
            END LOOP;
            FOR r IN
                SELECT s.limit_id::text || ':' || s.part AS key,
                       min(l.rate) - sum(s.starts)::integer AS room,
                       min(l.conc) AS conc
                FROM unnest(l_id, l_rate, l_per, l_conc) AS l(id, rate, per, conc)
                JOIN drover_limit_starts s
                  ON s.limit_id = l.id AND s.started_at > now() - l.per
                WHERE l.rate IS NOT NULL AND l.id = ANY (new_locks) AND l.id = ANY (held)
                GROUP BY s.limit_id, s.part
            LOOP
                pos := array_position(b_key, r.key);
                IF pos IS NULL THEN
                    b_key := b_key || r.key;
                    b_left := b_left || LEAST(r.conc, r.room);
                ELSE
                    b_left[pos] := LEAST(b_left[pos], r.room);
                END IF;
            END LOOP;
            FOR pos IN 1 .. cardinality(b_key) LOOP
                IF b_left[pos] <= 0 AND NOT b_key[pos] = ANY (spent) THEN
                    spent := spent || b_key[pos];
                END IF;
            END LOOP;
        END IF;

        -- A key of a held limit with no count had nothing running and no
        -- start when the limit was locked, and none since (this claim holds
        -- the lock): its budget is the whole limit.
        FOREACH k IN ARRAY k_key LOOP
            lid := split_part(k, ':', 1)::integer;
            IF lid = ANY (held) AND array_position(b_key, k) IS NULL THEN
                pos := array_position(l_id, lid);
                b_key := b_key || k;
                b_left := b_left || LEAST(l_conc[pos], l_rate[pos]);
            END IF;
        END LOOP;

        -- 4. Admit in claim order while every budget has room.
        refused := false;
        kfirst := 1;
        FOR ci IN 1 .. cardinality(c_id) LOOP
            klast := kfirst;
            WHILE klast <= cardinality(k_pos) AND k_pos[klast] = ci LOOP
                klast := klast + 1;
            END LOOP;
            klast := klast - 1;
            ok := cardinality(admitted) < p_limit;
            FOR kj IN kfirst .. klast LOOP
                pos := array_position(b_key, k_key[kj]);
                IF pos IS NULL OR b_left[pos] <= 0 THEN
                    ok := false;
                END IF;
            END LOOP;
            IF ok THEN
                is_conc := false;
                FOR kj IN kfirst .. klast LOOP
                    pos := array_position(b_key, k_key[kj]);
                    b_left[pos] := b_left[pos] - 1;
                    IF b_left[pos] <= 0 THEN
                        spent := spent || k_key[kj];
                    END IF;
                    pos := array_position(l_id, split_part(k_key[kj], ':', 1)::integer);
                    IF l_conc[pos] IS NOT NULL THEN
                        is_conc := true;
                    END IF;
                    IF l_rate[pos] IS NOT NULL THEN
                        pos := array_position(s_key, k_key[kj]);
                        IF pos IS NULL THEN
                            s_key := s_key || k_key[kj];
                            s_count := s_count || 1;
                        ELSE
                            s_count[pos] := s_count[pos] + 1;
                        END IF;
                    END IF;
                END LOOP;
                admitted := admitted || c_id[ci];
                IF is_conc THEN
                    admitted_conc := admitted_conc || c_id[ci];
                END IF;
            ELSE
                refused := true;
            END IF;
            kfirst := klast + 1;
        END LOOP;

        -- 5. Another round only when it can admit more: room in the claim,
        -- a refusal to look past, and not the whole queue's budget spent
        -- (a round would then read the queue to its end for nothing).
        EXIT WHEN cardinality(admitted) >= p_limit OR NOT refused OR round >= 3;
        EXIT WHEN EXISTS (
            SELECT 1 FROM unnest(l_id, l_scope, l_part) AS t(id, scope, part)
            WHERE t.scope = 'queue' AND t.part = '' AND (t.id::text || ':') = ANY (spent)
        );
        want := p_limit - cardinality(admitted);
    END LOOP;

    IF cardinality(admitted) = 0 THEN
        RETURN;
    END IF;

    -- Record the starts rate limits count, and drop those no window needs.
    IF cardinality(s_key) > 0 THEN
        INSERT INTO drover_limit_starts (limit_id, part, started_at, starts)
        SELECT split_part(x.key, ':', 1)::integer,
               substr(x.key, strpos(x.key, ':') + 1),
               now(),
               x.n
        FROM unnest(s_key, s_count) AS x(key, n);
        DELETE FROM drover_limit_starts s
        USING unnest(l_id, l_rate, l_per) AS t(id, rate, per)
        WHERE s.limit_id = t.id AND t.rate IS NOT NULL AND t.id = ANY (held)
          AND s.started_at <= now() - t.per;
    END IF;

    RETURN QUERY
    UPDATE drover_jobs j
    SET state = 'running',
        attempt = j.attempt + 1,
        leased_until = now() + make_interval(secs => p_lease),
        leased_by = p_holder,
        attempted_at = now()
    WHERE j.id = ANY (admitted)
    RETURNING j, j.id = ANY (admitted_conc);
END
$claim$;
