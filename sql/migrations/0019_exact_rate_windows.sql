-- Exact rate windows (ADR 0052): drover_claim_limited as migration 0012 left
-- it (same signature, locks, rounds and result), but with the claim's time
-- read from the clock once the limits' locks are held, not the
-- transaction's now().
--
-- Before: the starts were counted in (now() - per, now()], recorded at now()
-- and pruned at or before now() - per, with now() the time the claim's
-- transaction began. Claims wait for a limit's lock in arrival order, not in
-- now() order, so a claim that began later but took the lock first pruned
-- starts that an earlier-begun claim, still waiting for the lock, had yet to
-- count: that claim undercounted and admitted more than the rate (203 to 210
-- claims in one second under a limit of 200 per second, issue 40). The
-- count itself was sound (ADR 0025); the prune was not.
--
-- Now: claim_at := clock_timestamp() once the locks of a round are granted.
-- The count is of starts in (claim_at - per, claim_at], the starts are
-- recorded at the claim's last such time, the prune drops starts at or
-- before claim_at - per - 1 second, and the admitted jobs' attempted_at is
-- that time.
-- Since a claim takes a limit's lock only after the previous holder
-- committed, the times one limit's claims record rise in lock order, so no
-- claim prunes what a later one counts; ADR 0052 has the proof.
--
-- Also the start-time form of a rate (Limit(counts="starts")): the column
-- counts_starts, which the claim skips the rate of, and drover_take_start,
-- which the worker calls just before the handler, under the same lock and
-- with the same clock rule.

-- Whether the limit's rate counts handler starts (taken by the worker with
-- drover_take_start) rather than claims. Declared by code only.
ALTER TABLE drover_limits ADD COLUMN counts_starts boolean NOT NULL DEFAULT false;
CREATE OR REPLACE FUNCTION drover_claim_limited(
    p_queue text, p_limit integer, p_lease double precision, p_holder text
) RETURNS TABLE (o_job drover_jobs, o_concurrency boolean)
LANGUAGE plpgsql VOLATILE
-- Generic plans for every statement inside (see the header).
SET plan_cache_mode = force_generic_plan
AS $claim$
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
    paused boolean;
    count_running boolean;
    count_starts boolean;
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
    -- The claim's time on the limits it holds: the clock read after the
    -- last of their locks was granted (NULL until a lock is held). Counts,
    -- the starts recorded, the prune and attempted_at all use it.
    claim_at timestamptz;
    locked boolean;
BEGIN
    SELECT EXISTS (
               SELECT 1 FROM drover_queues q WHERE q.name = p_queue AND q.paused_at IS NOT NULL
           ),
           COALESCE(array_agg(l.id ORDER BY l.id), '{}'),
           COALESCE(array_agg(l.scope ORDER BY l.id), '{}'),
           COALESCE(array_agg(l.target ORDER BY l.id), '{}'),
           COALESCE(array_agg(l.partition_by ORDER BY l.id), '{}'),
           COALESCE(array_agg(COALESCE(l.override_concurrency, l.declared_concurrency)
                              ORDER BY l.id), '{}'),
           -- A rate that counts starts is taken by the worker (drover_take_start).
           COALESCE(array_agg(CASE WHEN NOT l.counts_starts
                                   THEN COALESCE(l.override_rate, l.declared_rate) END
                              ORDER BY l.id), '{}'),
           COALESCE(array_agg(COALESCE(l.override_per, l.declared_per, interval '1 second')
                              ORDER BY l.id), '{}'),
           COALESCE(bool_or(l.partition_by <> ''), false)
    INTO paused, l_id, l_scope, l_target, l_part, l_conc, l_rate, l_per, has_parts
    FROM drover_limits l
    WHERE (l.scope = 'kind' OR (l.scope = 'queue' AND l.target = p_queue))
      AND (COALESCE(l.override_concurrency, l.declared_concurrency) IS NOT NULL
           OR (NOT l.counts_starts AND COALESCE(l.override_rate, l.declared_rate) IS NOT NULL));
    IF paused THEN
        RETURN;
    END IF;

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

        -- Each candidate's budget keys (the queue's own limits apply to all),
        -- the limits among them this claim does not hold yet, and whether
        -- those count running jobs, starts or both.
        SELECT COALESCE(array_agg(x.i ORDER BY x.i, x.id), '{}'),
               COALESCE(array_agg(x.key ORDER BY x.i, x.id), '{}'),
               COALESCE(array_agg(DISTINCT x.id ORDER BY x.id)
                        FILTER (WHERE NOT x.id = ANY (held)), '{}'),
               COALESCE(bool_or(x.conc IS NOT NULL) FILTER (WHERE NOT x.id = ANY (held)), false),
               COALESCE(bool_or(x.rate IS NOT NULL) FILTER (WHERE NOT x.id = ANY (held)), false)
        INTO k_pos, k_key, new_locks, count_running, count_starts
        FROM (
            SELECT c.i::integer AS i, l.id, l.conc, l.rate,
                   l.id::text || ':' || CASE
                       WHEN l.part = '' THEN ''
                       ELSE COALESCE((c.args -> l.part)::text, 'null')
                   END AS key
            FROM unnest(c_kind, c_args) WITH ORDINALITY AS c(kind, args, i)
            JOIN unnest(l_id, l_scope, l_target, l_part, l_conc, l_rate)
                AS l(id, scope, target, part, conc, rate)
              ON l.scope = 'queue' OR l.target = c.kind
        ) x;
        IF cardinality(k_key) = 0 THEN
            -- No limit applies to any candidate: nothing to lock or count.
            admitted := admitted || c_id;
            EXIT;
        END IF;

        -- 2. Lock the limits the candidates draw on that this claim does not
        -- hold yet, in id order; wait only in the first round. Then read the
        -- clock: a claim that takes a limit's lock after another reads a
        -- later time than the other recorded (it committed before the lock
        -- was granted), so the times of one limit's claims follow their
        -- lock order, whatever order their transactions started in.
        locked := false;
        FOREACH lid IN ARRAY new_locks LOOP
            IF round = 1 THEN
                PERFORM pg_advisory_xact_lock(lock_class, lid);
                held := held || lid;
                locked := true;
            ELSIF pg_try_advisory_xact_lock(lock_class, lid) THEN
                held := held || lid;
                locked := true;
            END IF;
        END LOOP;
        IF locked THEN
            claim_at := clock_timestamp();
        END IF;

        -- 3. Count the budgets of the limits just locked: every key seen among
        -- running jobs and recent starts (so the spent ones are known), then
        -- the candidates' own keys not seen there, which have the whole limit.
        IF count_running THEN
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
        END IF;
        IF count_starts THEN
            FOR r IN
                SELECT s.limit_id::text || ':' || s.part AS key,
                       min(l.rate) - sum(s.starts)::integer AS room,
                       min(l.conc) AS conc
                FROM unnest(l_id, l_rate, l_per, l_conc) AS l(id, rate, per, conc)
                JOIN drover_limit_starts s
                  ON s.limit_id = l.id AND s.started_at > claim_at - l.per
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
        END IF;
        IF count_running OR count_starts THEN
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

    -- Record the starts rate limits count, at the claim's time, and drop
    -- those no later claim can count: a later claim of the limit reads a
    -- time at or after this one, so it counts only starts after claim_at - per.
    -- A second more is kept against a step back of the server's clock.
    IF cardinality(s_key) > 0 THEN
        INSERT INTO drover_limit_starts (limit_id, part, started_at, starts)
        SELECT split_part(x.key, ':', 1)::integer,
               substr(x.key, strpos(x.key, ':') + 1),
               claim_at,
               x.n
        FROM unnest(s_key, s_count) AS x(key, n);
        DELETE FROM drover_limit_starts s
        USING unnest(l_id, l_rate, l_per) AS t(id, rate, per)
        WHERE s.limit_id = t.id AND t.rate IS NOT NULL AND t.id = ANY (held)
          AND s.started_at <= claim_at - t.per - interval '1 second';
    END IF;

    RETURN QUERY
    UPDATE drover_jobs j
    SET state = 'running',
        attempt = j.attempt + 1,
        leased_until = now() + make_interval(secs => p_lease),
        leased_by = p_holder,
        attempted_at = COALESCE(claim_at, now())
    WHERE j.id = ANY (admitted)
    RETURNING j, j.id = ANY (admitted_conc);
END
$claim$;

-- The start of one handler under the rate limits that count starts and apply
-- to the job (its kind's and its queue's, with counts_starts), taken by the
-- worker just before the handler runs. Under each limit's lock (the claim's
-- lock, in id order) it reads started := clock_timestamp() and counts the
-- starts of the job's budget key in (started - per, started]. When every
-- budget has room, one start is recorded at that time for each, older ones
-- no later start can count are pruned (as the claim does), and the answer is
-- (started, NULL). When one is full, nothing is written and the answer is
-- (NULL, seconds until the oldest start of the fullest window leaves it):
-- the worker waits that long and asks again. A job that has no such limit
-- gets (clock_timestamp(), NULL). A job no longer running with p_attempt
-- (its claim was lost) gets (NULL, NULL) with its state and attempt now
-- (NULL, NULL when it is gone): its handler must not run. Neither records.
CREATE FUNCTION drover_take_start(p_job bigint, p_attempt integer)
RETURNS TABLE (
    o_started timestamptz, o_wait double precision, o_state text, o_attempt integer
)
LANGUAGE plpgsql VOLATILE AS $take$
DECLARE
    lock_class integer := ('drover_limits'::regclass::oid::bigint % 2147483647)::integer;
    j record;
    started timestamptz;
    wait double precision;
    ids integer[];
    parts text[];
    rates integer[];
    pers interval[];
    used bigint;
    oldest timestamptz;
    i integer;
BEGIN
    SELECT d.kind, d.queue, d.args, d.state::text AS state, d.attempt INTO j
    FROM drover_jobs d
    WHERE d.id = p_job;
    IF NOT FOUND OR j.state <> 'running' OR j.attempt <> p_attempt THEN
        RETURN QUERY SELECT NULL::timestamptz, NULL::double precision, j.state, j.attempt;
        RETURN;
    END IF;
    SELECT COALESCE(array_agg(l.id ORDER BY l.id), '{}'),
           COALESCE(array_agg(CASE WHEN l.partition_by = '' THEN ''
                                   ELSE COALESCE((j.args -> l.partition_by)::text, 'null') END
                              ORDER BY l.id), '{}'),
           COALESCE(array_agg(COALESCE(l.override_rate, l.declared_rate) ORDER BY l.id), '{}'),
           COALESCE(array_agg(COALESCE(l.override_per, l.declared_per, interval '1 second')
                              ORDER BY l.id), '{}')
    INTO ids, parts, rates, pers
    FROM drover_limits l
    WHERE l.counts_starts
      AND COALESCE(l.override_rate, l.declared_rate) IS NOT NULL
      AND ((l.scope = 'kind' AND l.target = j.kind) OR (l.scope = 'queue' AND l.target = j.queue));
    IF cardinality(ids) = 0 THEN
        RETURN QUERY SELECT clock_timestamp(), NULL::double precision, j.state, j.attempt;
        RETURN;
    END IF;
    FOR i IN 1 .. cardinality(ids) LOOP
        PERFORM pg_advisory_xact_lock(lock_class, ids[i]);
    END LOOP;
    -- After every lock: later than any start recorded under them before.
    started := clock_timestamp();
    FOR i IN 1 .. cardinality(ids) LOOP
        SELECT COALESCE(sum(s.starts), 0), min(s.started_at) INTO used, oldest
        FROM drover_limit_starts s
        WHERE s.limit_id = ids[i] AND s.part = parts[i] AND s.started_at > started - pers[i];
        IF used >= rates[i] THEN
            wait := GREATEST(COALESCE(wait, 0),
                             extract(epoch FROM oldest + pers[i] - started)::double precision);
        END IF;
    END LOOP;
    IF wait IS NOT NULL THEN
        RETURN QUERY SELECT NULL::timestamptz, wait, j.state, j.attempt;
        RETURN;
    END IF;
    INSERT INTO drover_limit_starts (limit_id, part, started_at, starts)
    SELECT x.id, x.part, started, 1 FROM unnest(ids, parts) AS x(id, part);
    DELETE FROM drover_limit_starts s
    USING unnest(ids, pers) AS t(id, per)
    WHERE s.limit_id = t.id AND s.started_at <= started - t.per - interval '1 second';
    RETURN QUERY SELECT started, NULL::double precision, j.state, j.attempt;
END
$take$;
