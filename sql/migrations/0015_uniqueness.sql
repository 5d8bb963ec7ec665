-- Uniqueness by identity: by args (all or named fields), queue, explicit
-- key, period and states, plus debounce and throttle (ADR 0031).
--
-- drover computes the identity in Python (a SHA-256 of the canonical JSON of
-- the form, the kind and the chosen parts) and sends it as unique_hash. A
-- unique period adds its bucket, counted on the database clock, in
-- unique_bucket (0 without a period). unique_states is a bit mask of the
-- states in which the row holds its identity, one bit per drover_job_state
-- value in the enum's order (pending = 1, available = 2, scheduled = 4,
-- running = 8, retryable = 16, completed = 32, cancelled = 64, dead = 128).
-- 0 means the row holds nothing (a throttled or debounced job whose hold was
-- handed to a newer one). The old unique_key column and its index are
-- untouched: both forms live side by side.
--
-- Adding nullable columns and a column with a constant default rewrites
-- nothing; the index is built without CONCURRENTLY (migrations run in a
-- transaction) but covers no existing row.
ALTER TABLE drover_jobs ADD COLUMN unique_hash bytea;
ALTER TABLE drover_jobs ADD COLUMN unique_bucket bigint NOT NULL DEFAULT 0;
ALTER TABLE drover_jobs ADD COLUMN unique_states smallint NOT NULL DEFAULT 0;

-- The bit of a state in unique_states. IMMUTABLE so that the partial index
-- below may call it.
CREATE FUNCTION drover_state_bit(s drover_job_state) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
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

-- At most one row per identity (and period bucket) among the rows whose
-- current state is in their own mask. A row leaves the index when it moves
-- to a state outside its mask, and re-enters it if it moves back, which is
-- why every mask includes the states a job moves among by itself (pending,
-- available, scheduled, running, retryable): a row could otherwise re-enter
-- beside a newer holder and fail the worker's write (ADR 0031).
CREATE UNIQUE INDEX drover_jobs_unique_identity_idx ON drover_jobs (unique_hash, unique_bucket)
    WHERE unique_hash IS NOT NULL
      AND (unique_states & drover_state_bit(state)) <> 0;

-- Insert jobs with an identity, one after another in one call, and say for
-- each whether it was inserted or an existing job was returned instead.
-- Items are a JSON array of arrays: [kind, queue, args, max_attempts,
-- scheduled_at, unique_key, priority, hash (hex), period (microseconds),
-- states (mask), form, window (microseconds), tags (a JSON array or null),
-- meta (a JSON object or null)], form 'u' (unique), 'd' (debounce) or 't'
-- (throttle). An item without a hash is a plain insert
-- (its unique_key, if any, arbitrated as by job_insert); a row with a NULL
-- job means that key was taken.
--
-- Each statement here takes a new snapshot (READ COMMITTED, a VOLATILE
-- function), so the read after a conflict sees the holder that made the
-- insert skip; if that holder left the states meanwhile, the item is tried
-- again. That loop is what makes the result exact without a lock: the unique
-- index decides every race.
CREATE FUNCTION drover_insert_unique(items jsonb, notify boolean)
RETURNS TABLE (ord bigint, duplicate boolean, job drover_jobs)
LANGUAGE plpgsql VOLATILE AS $$
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
