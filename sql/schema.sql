-- drover's schema, as its migrations leave it. GENERATED: do not edit by hand.
--
-- What `drover migrate` builds in an empty database's default schema (public)
-- through migration 0021_client_kinds,
-- as pg_dump prints it (schema only; no owners, privileges or tablespaces).
-- The migrations in sql/migrations stay the source of truth and the only SQL
-- `drover migrate` runs: this file is for reading and review, the package never
-- reads it and the wheel does not carry it (ADR 0049).
--
-- After adding or changing a migration, regenerate it from the root of a clone
-- (offline; tests/db/test_schema_file.py fails until you do):
--
--     .venv/bin/python -m tools.schema_dump --write
--
-- In a schema of drover's own (Config.schema, ADR 0043) the same objects live in
-- that schema, every function that is not IMMUTABLE also carries
-- SET search_path TO that schema, and the notification channels inside function
-- bodies are the schema's own ('drover.<schema>' for 'drover', and so on).

-- Function bodies name tables created further down; PostgreSQL checks them when
-- they run, not here.
SET check_function_bodies = false;

--
-- Name: drover_job_state; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.drover_job_state AS ENUM (
    'pending',
    'available',
    'scheduled',
    'running',
    'retryable',
    'completed',
    'cancelled',
    'dead'
);


--
-- Name: drover_cancel_dependents(bigint[], text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.drover_cancel_dependents(ended bigint[], how text[]) RETURNS bigint[]
    LANGUAGE plpgsql
    AS $$
DECLARE
    frontier bigint[] := ended;
    frontier_how text[] := how;
    cancelled bigint[] := '{}';
    step bigint[];
BEGIN
    LOOP
        WITH cause AS (
            SELECT f.id, f.how FROM unnest(frontier, frontier_how) AS f(id, how)
        ), first_cause AS (
            SELECT DISTINCT ON (e.job_id) e.job_id, c.id AS dep, c.how
            FROM drover_job_deps e
            JOIN cause c ON c.id = e.depends_on
            WHERE e.depends_on = ANY (frontier)
            ORDER BY e.job_id, c.id
        ), hit AS (
            UPDATE drover_jobs j
            SET state = 'cancelled',
                finalized_at = now(),
                pending_deps = 0,
                errors = j.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', j.attempt,
                    'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                    'error', 'dependency ' || d.dep || ' ended ' || d.how
                        || ', so this job will not run'))
            FROM first_cause d
            WHERE j.id = d.job_id AND j.state = 'pending'
            RETURNING j.id,
                (CASE WHEN j.awaited THEN pg_notify('drover_done', j.id::text) END) IS NULL AS quiet
        )
        SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO step FROM hit;
        EXIT WHEN cardinality(step) = 0;
        cancelled := cancelled || step;
        frontier := step;
        frontier_how := array_fill('cancelled'::text, ARRAY[cardinality(step)]);
    END LOOP;
    RETURN cancelled;
END;
$$;


--
-- Name: drover_cancel_entry(jsonb, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.drover_cancel_entry(request jsonb, attempt integer) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT jsonb_build_object(
        'attempt', attempt,
        'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'error', 'drover: job cancelled by operator'
            || COALESCE(': ' || (request ->> 'reason'), '')
    )
$$;


--
-- Name: drover_jobs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.drover_jobs (
    id bigint NOT NULL,
    kind text NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    args jsonb DEFAULT '{}'::jsonb NOT NULL,
    state public.drover_job_state DEFAULT 'available'::public.drover_job_state NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 25 NOT NULL,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    scheduled_at timestamp with time zone DEFAULT now() NOT NULL,
    leased_until timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finalized_at timestamp with time zone,
    unique_key text,
    leased_by text,
    attempted_at timestamp with time zone,
    priority smallint DEFAULT 0 NOT NULL,
    result jsonb,
    awaited boolean DEFAULT false NOT NULL,
    pending_deps integer DEFAULT 0 NOT NULL,
    has_dependents boolean DEFAULT false NOT NULL,
    workflow_id bigint,
    cancel_request jsonb,
    progress real,
    progress_message text,
    meta jsonb DEFAULT '{}'::jsonb NOT NULL,
    tags text[] DEFAULT '{}'::text[] NOT NULL,
    unique_hash bytea,
    unique_bucket bigint DEFAULT 0 NOT NULL,
    unique_states smallint DEFAULT 0 NOT NULL,
    ledger jsonb
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_vacuum_threshold='1000', autovacuum_analyze_scale_factor='0.02', autovacuum_analyze_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.02');


--
-- Name: drover_claim_limited(text, integer, double precision, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.drover_claim_limited(p_queue text, p_limit integer, p_lease double precision, p_holder text) RETURNS TABLE(o_job public.drover_jobs, o_concurrency boolean)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
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
$$;


--
-- Name: drover_insert_unique(jsonb, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.drover_insert_unique(items jsonb, notify boolean) RETURNS TABLE(ord bigint, duplicate boolean, job public.drover_jobs)
    LANGUAGE plpgsql
    AS $$
DECLARE
    e jsonb;
    n bigint;
    h bytea;
    b bigint;
    mask smallint;
    form text;
    win interval;
    due timestamptz;
    new_id bigint;
    updated boolean;
    tries integer;
    r drover_jobs;
    tg text[];
    mt jsonb;
BEGIN
    FOR e, n IN SELECT t.v, t.o FROM jsonb_array_elements(items) WITH ORDINALITY AS t(v, o) LOOP
        h := decode(e->>7, 'hex');
        tg := COALESCE(ARRAY(SELECT jsonb_array_elements_text(e->12)), '{}');
        mt := COALESCE(NULLIF(e->13, 'null'::jsonb), '{}');
        mask := COALESCE((e->>9)::smallint, 0);
        form := COALESCE(e->>10, 'u');
        win := COALESCE((e->>11)::bigint, 0) * interval '1 microsecond';
        b := CASE WHEN e->>8 IS NULL THEN 0
                  ELSE div(extract(epoch FROM now())::numeric * 1000000, (e->>8)::numeric)::bigint END;
        due := CASE WHEN form = 'd' THEN now() + win
                    ELSE GREATEST(COALESCE((e->>4)::timestamptz, now()), now()) END;
        r := NULL;
        duplicate := false;
        tries := 0;
        LOOP
            tries := tries + 1;
            IF tries > 100 THEN
                RAISE EXCEPTION 'drover: the unique identity of item % kept changing hands', n - 1;
            END IF;
            IF form = 'd' THEN
                -- A running holder keeps its execution but hands the identity
                -- on: this insert makes the next job.
                UPDATE drover_jobs j SET unique_states = 0
                WHERE j.unique_hash = h AND j.unique_bucket = b
                  AND (j.unique_states & drover_state_bit(j.state)) <> 0
                  AND j.state = 'running';
                new_id := NULL;
                INSERT INTO drover_jobs AS j (kind, queue, args, max_attempts, scheduled_at, state,
                                              priority, unique_hash, unique_bucket, unique_states,
                                              tags, meta)
                VALUES (e->>0, e->>1, e->2, (e->>3)::integer, due,
                        CASE WHEN due > now() THEN 'scheduled' ELSE 'available' END::drover_job_state,
                        (e->>6)::smallint, h, b, mask, tg, mt)
                ON CONFLICT (unique_hash, unique_bucket)
                    WHERE unique_hash IS NOT NULL
                      AND (unique_states & drover_state_bit(state)) <> 0
                    DO UPDATE SET args = EXCLUDED.args,
                                  scheduled_at = EXCLUDED.scheduled_at,
                                  state = CASE WHEN j.state = 'available' THEN EXCLUDED.state
                                               ELSE j.state END,
                                  max_attempts = EXCLUDED.max_attempts,
                                  priority = EXCLUDED.priority,
                                  tags = EXCLUDED.tags,
                                  meta = EXCLUDED.meta
                    WHERE j.state IN ('available', 'scheduled', 'retryable', 'pending')
                RETURNING j.id, j.xmax::text <> '0' INTO new_id, updated;
                IF new_id IS NOT NULL THEN
                    SELECT * INTO r FROM drover_jobs j WHERE j.id = new_id;
                    duplicate := updated;
                    EXIT;
                END IF;
                CONTINUE;
            END IF;
            IF form = 't' THEN
                -- A holder older than the window hands the identity on.
                UPDATE drover_jobs j SET unique_states = 0
                WHERE j.unique_hash = h AND j.unique_bucket = b
                  AND (j.unique_states & drover_state_bit(j.state)) <> 0
                  AND j.created_at <= now() - win;
            END IF;
            INSERT INTO drover_jobs AS j (kind, queue, args, max_attempts, scheduled_at, state,
                                          unique_key, priority, unique_hash, unique_bucket,
                                          unique_states, tags, meta)
            VALUES (e->>0, e->>1, e->2, (e->>3)::integer, due,
                    CASE WHEN due > now() THEN 'scheduled' ELSE 'available' END::drover_job_state,
                    e->>5, (e->>6)::smallint, h, b, mask, tg, mt)
            ON CONFLICT DO NOTHING
            RETURNING * INTO r;
            IF FOUND THEN
                EXIT;
            END IF;
            IF h IS NULL THEN
                EXIT;  -- a plain item whose unique_key was taken: r stays NULL
            END IF;
            SELECT * INTO r FROM drover_jobs j
            WHERE j.unique_hash = h AND j.unique_bucket = b
              AND (j.unique_states & drover_state_bit(j.state)) <> 0;
            IF FOUND THEN
                duplicate := true;
                EXIT;
            END IF;
        END LOOP;
        IF notify AND r.id IS NOT NULL AND NOT duplicate THEN
            PERFORM pg_notify('drover', r.queue);
        END IF;
        ord := n - 1;
        job := r;
        RETURN NEXT;
    END LOOP;
END;
$$;


--
-- Name: drover_ledger_push(jsonb, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.drover_ledger_push(ledger jsonb, entries jsonb) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE
        WHEN jsonb_array_length(c.all_entries) <= 50 THEN c.all_entries
        ELSE (
            SELECT jsonb_agg(t.e ORDER BY t.n)
            FROM jsonb_array_elements(c.all_entries) WITH ORDINALITY AS t(e, n)
            WHERE t.n > jsonb_array_length(c.all_entries) - 50
        )
    END
    FROM (
        SELECT COALESCE(ledger, '[]'::jsonb) || COALESCE((
            SELECT jsonb_agg(x.e || jsonb_build_object(
                'at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                ORDER BY x.n)
            FROM jsonb_array_elements(entries) WITH ORDINALITY AS x(e, n)
        ), '[]'::jsonb) AS all_entries
    ) c
$$;


--
-- Name: drover_limits_gates(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.drover_limits_gates() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: drover_release_dependents(bigint[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.drover_release_dependents(completed bigint[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    released integer;
    woken integer;
BEGIN
    WITH counts AS (
        SELECT e.job_id, count(*)::integer AS n
        FROM drover_job_deps e
        WHERE e.depends_on = ANY (completed)
        GROUP BY e.job_id
    ), moved AS (
        UPDATE drover_jobs j
        SET pending_deps = j.pending_deps - c.n,
            state = CASE WHEN j.pending_deps - c.n <= 0 THEN 'available' ELSE j.state END,
            scheduled_at = CASE
                WHEN j.pending_deps - c.n <= 0 THEN GREATEST(j.scheduled_at, now())
                ELSE j.scheduled_at
            END
        FROM counts c
        WHERE j.id = c.job_id AND j.state = 'pending'
        RETURNING j.queue, j.state
    )
    SELECT count(*) FILTER (WHERE m.state = 'available'),
           -- one wake-up per queue; identical payloads fold into one at commit
           count(pg_notify('drover', m.queue)) FILTER (WHERE m.state = 'available')
    INTO released, woken
    FROM moved m;
    RETURN released;
END;
$$;


--
-- Name: drover_state_bit(public.drover_job_state); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.drover_state_bit(s public.drover_job_state) RETURNS smallint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE s
        WHEN 'pending' THEN 1
        WHEN 'available' THEN 2
        WHEN 'scheduled' THEN 4
        WHEN 'running' THEN 8
        WHEN 'retryable' THEN 16
        WHEN 'completed' THEN 32
        WHEN 'cancelled' THEN 64
        WHEN 'dead' THEN 128
    END::smallint
$$;


--
-- Name: drover_take_start(bigint, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.drover_take_start(p_job bigint, p_attempt integer) RETURNS TABLE(o_started timestamp with time zone, o_wait double precision, o_state text, o_attempt integer)
    LANGUAGE plpgsql
    AS $$
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
$$;


--
-- Name: drover_watched(public.drover_jobs); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.drover_watched(j public.drover_jobs) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT j.awaited OR j.has_dependents OR j.cancel_request IS NOT NULL
        OR j.result IS NOT NULL
$$;


--
-- Name: drover_clients; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.drover_clients (
    id text NOT NULL,
    client_id text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    version text NOT NULL,
    queues text[] NOT NULL,
    concurrency integer NOT NULL,
    running integer DEFAULT 0 NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    claims bigint,
    claim_p50_seconds double precision,
    claim_p99_seconds double precision,
    claim_max_seconds double precision,
    walk_max_seconds double precision,
    kinds text[]
);


--
-- Name: drover_gates; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.drover_gates (
    queue text NOT NULL,
    via text NOT NULL
);


--
-- Name: drover_health_samples; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.drover_health_samples (
    sampled_at timestamp with time zone NOT NULL,
    live_tuples bigint,
    dead_tuples bigint,
    total_bytes bigint,
    claims bigint DEFAULT 0 NOT NULL,
    claim_p50_seconds double precision,
    claim_p99_seconds double precision,
    claim_max_seconds double precision,
    walk_max_seconds double precision,
    horizon_xids bigint
);


--
-- Name: drover_job_deps; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.drover_job_deps (
    job_id bigint NOT NULL,
    depends_on bigint NOT NULL
);


--
-- Name: drover_jobs_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.drover_jobs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.drover_jobs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: drover_limit_starts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.drover_limit_starts (
    limit_id integer NOT NULL,
    part text NOT NULL,
    started_at timestamp with time zone NOT NULL,
    starts integer NOT NULL
);


--
-- Name: drover_limits; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.drover_limits (
    id integer NOT NULL,
    scope text NOT NULL,
    target text NOT NULL,
    partition_by text DEFAULT ''::text NOT NULL,
    declared_concurrency integer,
    declared_rate integer,
    declared_per interval,
    declared_at timestamp with time zone,
    override_concurrency integer,
    override_rate integer,
    override_per interval,
    overridden_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    counts_starts boolean DEFAULT false NOT NULL,
    CONSTRAINT drover_limits_declared_concurrency_check CHECK ((declared_concurrency > 0)),
    CONSTRAINT drover_limits_declared_per_check CHECK ((declared_per > '00:00:00'::interval)),
    CONSTRAINT drover_limits_declared_rate_check CHECK ((declared_rate > 0)),
    CONSTRAINT drover_limits_override_concurrency_check CHECK ((override_concurrency > 0)),
    CONSTRAINT drover_limits_override_per_check CHECK ((override_per > '00:00:00'::interval)),
    CONSTRAINT drover_limits_override_rate_check CHECK ((override_rate > 0)),
    CONSTRAINT drover_limits_scope_check CHECK ((scope = ANY (ARRAY['queue'::text, 'kind'::text]))),
    CONSTRAINT drover_limits_target_check CHECK ((target <> ''::text))
);


--
-- Name: drover_limits_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.drover_limits ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.drover_limits_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: drover_periodic_leader; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.drover_periodic_leader (
    singleton boolean DEFAULT true NOT NULL,
    client_id text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    backend_pid integer NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT drover_periodic_leader_singleton_check CHECK (singleton)
);


--
-- Name: drover_periodic_lease; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.drover_periodic_lease (
    singleton boolean DEFAULT true NOT NULL,
    holder text NOT NULL,
    leased_until timestamp with time zone NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT drover_periodic_lease_singleton_check CHECK (singleton)
);


--
-- Name: drover_periodic_ticks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.drover_periodic_ticks (
    id text NOT NULL,
    schedule text NOT NULL,
    timezone text NOT NULL,
    kind text NOT NULL,
    queue text NOT NULL,
    fired_through timestamp with time zone NOT NULL,
    last_fire timestamp with time zone,
    last_job_id bigint,
    next_fire timestamp with time zone,
    defined_by text NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: drover_queues; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.drover_queues (
    name text NOT NULL,
    paused_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: drover_schema_version; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.drover_schema_version (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: drover_clients drover_clients_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_clients
    ADD CONSTRAINT drover_clients_pkey PRIMARY KEY (id);


--
-- Name: drover_gates drover_gates_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_gates
    ADD CONSTRAINT drover_gates_pkey PRIMARY KEY (queue, via);


--
-- Name: drover_health_samples drover_health_samples_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_health_samples
    ADD CONSTRAINT drover_health_samples_pkey PRIMARY KEY (sampled_at);


--
-- Name: drover_job_deps drover_job_deps_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_job_deps
    ADD CONSTRAINT drover_job_deps_pkey PRIMARY KEY (job_id, depends_on);


--
-- Name: drover_jobs drover_jobs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_jobs
    ADD CONSTRAINT drover_jobs_pkey PRIMARY KEY (id);


--
-- Name: drover_jobs drover_jobs_priority_range; Type: CHECK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.drover_jobs
    ADD CONSTRAINT drover_jobs_priority_range CHECK (((priority >= '-100'::integer) AND (priority <= 100))) NOT VALID;


--
-- Name: drover_limits drover_limits_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_limits
    ADD CONSTRAINT drover_limits_pkey PRIMARY KEY (id);


--
-- Name: drover_limits drover_limits_scope_target_partition_by_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_limits
    ADD CONSTRAINT drover_limits_scope_target_partition_by_key UNIQUE (scope, target, partition_by);


--
-- Name: drover_periodic_leader drover_periodic_leader_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_periodic_leader
    ADD CONSTRAINT drover_periodic_leader_pkey PRIMARY KEY (singleton);


--
-- Name: drover_periodic_lease drover_periodic_lease_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_periodic_lease
    ADD CONSTRAINT drover_periodic_lease_pkey PRIMARY KEY (singleton);


--
-- Name: drover_periodic_ticks drover_periodic_ticks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_periodic_ticks
    ADD CONSTRAINT drover_periodic_ticks_pkey PRIMARY KEY (id);


--
-- Name: drover_queues drover_queues_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_queues
    ADD CONSTRAINT drover_queues_pkey PRIMARY KEY (name);


--
-- Name: drover_schema_version drover_schema_version_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_schema_version
    ADD CONSTRAINT drover_schema_version_pkey PRIMARY KEY (version);


--
-- Name: drover_job_deps_depends_on_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX drover_job_deps_depends_on_idx ON public.drover_job_deps USING btree (depends_on);


--
-- Name: drover_jobs_dead_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX drover_jobs_dead_idx ON public.drover_jobs USING btree (queue, id) WHERE (state = 'dead'::public.drover_job_state);


--
-- Name: drover_jobs_fetch_v3_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX drover_jobs_fetch_v3_idx ON public.drover_jobs USING btree (queue, priority, scheduled_at, id) WHERE (state = ANY (ARRAY['available'::public.drover_job_state, 'retryable'::public.drover_job_state, 'scheduled'::public.drover_job_state]));


--
-- Name: drover_jobs_finalized_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX drover_jobs_finalized_idx ON public.drover_jobs USING btree (state, finalized_at) WHERE (finalized_at IS NOT NULL);


--
-- Name: drover_jobs_lease_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX drover_jobs_lease_idx ON public.drover_jobs USING btree (leased_until, id) WHERE (state = 'running'::public.drover_job_state);


--
-- Name: drover_jobs_tags_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX drover_jobs_tags_idx ON public.drover_jobs USING gin (tags) WHERE (tags <> '{}'::text[]);


--
-- Name: drover_jobs_unique_active_v2_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX drover_jobs_unique_active_v2_idx ON public.drover_jobs USING btree (queue, kind, unique_key) WHERE ((unique_key IS NOT NULL) AND (state = ANY (ARRAY['pending'::public.drover_job_state, 'available'::public.drover_job_state, 'scheduled'::public.drover_job_state, 'retryable'::public.drover_job_state, 'running'::public.drover_job_state])));


--
-- Name: drover_jobs_unique_identity_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX drover_jobs_unique_identity_idx ON public.drover_jobs USING btree (unique_hash, unique_bucket) WHERE ((unique_hash IS NOT NULL) AND ((unique_states & public.drover_state_bit(state)) <> 0));


--
-- Name: drover_jobs_workflow_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX drover_jobs_workflow_idx ON public.drover_jobs USING btree (workflow_id) WHERE (workflow_id IS NOT NULL);


--
-- Name: drover_limit_starts_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX drover_limit_starts_idx ON public.drover_limit_starts USING btree (limit_id, part, started_at);


--
-- Name: drover_limits drover_limits_gates_delete; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER drover_limits_gates_delete AFTER DELETE ON public.drover_limits REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION public.drover_limits_gates();


--
-- Name: drover_limits drover_limits_gates_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER drover_limits_gates_insert AFTER INSERT ON public.drover_limits REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION public.drover_limits_gates();


--
-- Name: drover_limits drover_limits_gates_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER drover_limits_gates_truncate AFTER TRUNCATE ON public.drover_limits FOR EACH STATEMENT EXECUTE FUNCTION public.drover_limits_gates();


--
-- Name: drover_limits drover_limits_gates_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER drover_limits_gates_update AFTER UPDATE ON public.drover_limits REFERENCING OLD TABLE AS before NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION public.drover_limits_gates();


--
-- Name: drover_job_deps drover_job_deps_job_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_job_deps
    ADD CONSTRAINT drover_job_deps_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.drover_jobs(id) ON DELETE CASCADE;


--
-- Name: drover_limit_starts drover_limit_starts_limit_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drover_limit_starts
    ADD CONSTRAINT drover_limit_starts_limit_id_fkey FOREIGN KEY (limit_id) REFERENCES public.drover_limits(id) ON DELETE CASCADE;
