-- Cluster-wide limits (ADR 0025): declarations from code, operators'
-- overrides, and what each limit is using now. The claim itself reads
-- drover_limits (migration 0008), so a change here holds from every
-- client's next claim. Changes notify channel "drover" with "*", which wakes
-- every listening client's fetcher: jobs a limit held back start at once.

-- name: limit_declare
-- What a starting client's code declares, one row per limit. Overrides are
-- kept; a declaration replaces the previous one whole (a field the code no
-- longer sets becomes NULL). No wake-up: a declaration at start usually
-- repeats the last one.
INSERT INTO drover_limits AS l (
    scope, target, partition_by,
    declared_concurrency, declared_rate, declared_per, declared_at, updated_at
)
SELECT t.scope, t.target, t.part, t.conc, t.rate, make_interval(secs => t.per), now(), now()
FROM unnest(
    %(scopes)s::text[], %(targets)s::text[], %(parts)s::text[],
    %(concs)s::int[], %(rates)s::int[], %(pers)s::float8[]
) AS t(scope, target, part, conc, rate, per)
ON CONFLICT (scope, target, partition_by) DO UPDATE
SET declared_concurrency = excluded.declared_concurrency,
    declared_rate = excluded.declared_rate,
    declared_per = excluded.declared_per,
    declared_at = excluded.declared_at,
    updated_at = CASE
        WHEN (l.declared_concurrency, l.declared_rate, l.declared_per)
             IS NOT DISTINCT FROM
             (excluded.declared_concurrency, excluded.declared_rate, excluded.declared_per)
        THEN l.updated_at
        ELSE now()
    END;

-- name: limit_set
-- An operator's override of the values given (the others keep their
-- override or declaration); creates the limit when no code declared it.
WITH set AS (
    INSERT INTO drover_limits AS l (
        scope, target, partition_by,
        override_concurrency, override_rate, override_per, overridden_at, updated_at
    )
    VALUES (
        %(scope)s, %(target)s, %(part)s,
        %(conc)s, %(rate)s, make_interval(secs => %(per)s::float8), now(), now()
    )
    ON CONFLICT (scope, target, partition_by) DO UPDATE
    SET override_concurrency = COALESCE(excluded.override_concurrency, l.override_concurrency),
        override_rate = COALESCE(excluded.override_rate, l.override_rate),
        override_per = COALESCE(excluded.override_per, l.override_per),
        overridden_at = now(),
        updated_at = now()
    RETURNING l.id
)
SELECT id, pg_notify('drover', '*')::text FROM set;

-- name: limit_clear
-- Drop an operator's override: the declared values apply again, and a limit
-- no code declared is removed. Returns whether there was an override.
WITH cleared AS (
    UPDATE drover_limits
    SET override_concurrency = NULL, override_rate = NULL, override_per = NULL,
        overridden_at = NULL, updated_at = now()
    WHERE scope = %(scope)s AND target = %(target)s AND partition_by = %(part)s
      AND overridden_at IS NOT NULL
    RETURNING id, declared_at
),
removed AS (
    DELETE FROM drover_limits l
    USING cleared c
    WHERE l.id = c.id AND c.declared_at IS NULL
    RETURNING l.id
)
SELECT c.id, pg_notify('drover', '*')::text, (SELECT count(*) FROM removed) FROM cleared c;

-- name: limit_delete
-- Remove a limit, declared or not (its starts go with it). A client whose
-- code still declares it writes it again when it next starts.
WITH removed AS (
    DELETE FROM drover_limits
    WHERE scope = %(scope)s AND target = %(target)s AND partition_by = %(part)s
    RETURNING id
)
SELECT id, pg_notify('drover', '*')::text FROM removed;

-- name: limit_list
-- Every limit with its effective, declared and override values, and its use
-- now: running jobs of the scope (all partitions), starts in the current
-- window, and partitions at their concurrency limit. Running jobs are read
-- through the partial lease index (running rows only).
WITH lim AS (
    SELECT l.*,
           COALESCE(l.override_concurrency, l.declared_concurrency) AS conc,
           COALESCE(l.override_rate, l.declared_rate) AS rate,
           COALESCE(l.override_per, l.declared_per, interval '1 second') AS per
    FROM drover_limits l
),
running AS (
    SELECT l.id,
           CASE WHEN l.partition_by = '' THEN ''
                ELSE COALESCE((j.args -> l.partition_by)::text, 'null') END AS part,
           count(*) AS n
    FROM lim l
    JOIN drover_jobs j
      ON j.state = 'running'
     AND ((l.scope = 'kind' AND j.kind = l.target) OR (l.scope = 'queue' AND j.queue = l.target))
    GROUP BY 1, 2
)
SELECT l.scope, l.target, l.partition_by,
       l.conc, l.rate, extract(epoch FROM l.per)::float8,
       l.declared_at IS NOT NULL,
       l.declared_concurrency, l.declared_rate, extract(epoch FROM l.declared_per)::float8,
       l.overridden_at IS NOT NULL,
       l.override_concurrency, l.override_rate, extract(epoch FROM l.override_per)::float8,
       COALESCE((SELECT sum(r.n) FROM running r WHERE r.id = l.id), 0)::bigint,
       COALESCE((
           SELECT sum(s.starts) FROM drover_limit_starts s
           WHERE s.limit_id = l.id AND l.rate IS NOT NULL AND s.started_at > now() - l.per
       ), 0)::bigint,
       (SELECT count(*) FROM running r WHERE r.id = l.id AND r.n >= l.conc)::bigint,
       l.updated_at
FROM lim l
ORDER BY l.scope, l.target, l.partition_by;
