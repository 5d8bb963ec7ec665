-- Dependencies and workflows (ADR 0029): inserting a graph of jobs, and
-- reading one back.

-- name: job_lock_dependencies
-- The existing jobs a new graph depends on, locked as the completion
-- statement locks them (FOR NO KEY UPDATE), so each one's end is ordered
-- before or after this insert: before, and this read sees it; after, and the
-- completion sees has_dependents (set next) and the new edges (ADR 0029).
SELECT id, state::text
FROM drover_jobs
WHERE id = ANY (%(ids)s::bigint[])
ORDER BY id
FOR NO KEY UPDATE;

-- name: job_mark_has_dependents
UPDATE drover_jobs SET has_dependents = true
WHERE id = ANY (%(ids)s::bigint[]) AND NOT has_dependents;

-- name: job_insert_graph
-- The jobs of a graph in one statement: ids drawn first, in input order (so
-- the workflow's id, its first job's, is known to every row), the edges
-- between them and to existing jobs, and a wake-up for the queues of the
-- jobs that are claimable at once. Each node is [kind, queue, args,
-- max_attempts, scheduled_at, priority, pending_deps, has_dependents], with
-- [..., tags, meta] appended for a job that has either (ADR 0032).
-- Foreign keys are checked at the end of the statement, after the rows
-- exist.
WITH r AS MATERIALIZED (
    SELECT nextval('drover_jobs_id_seq') AS id, e.ord,
           e.v->>0 AS kind, e.v->>1 AS queue, e.v->2 AS args,
           (e.v->>3)::integer AS max_attempts,
           GREATEST(COALESCE((e.v->>4)::timestamptz, now()), now()) AS at,
           (e.v->>5)::smallint AS priority,
           (e.v->>6)::integer AS pending_deps,
           (e.v->>7)::boolean AS has_dependents,
           ARRAY(SELECT jsonb_array_elements_text(e.v->8)) AS tags,
           COALESCE(e.v->9, '{}') AS meta
    FROM jsonb_array_elements(%(nodes)s::jsonb) WITH ORDINALITY AS e(v, ord)
), w AS (
    SELECT CASE WHEN %(workflow)s::boolean THEN min(id) END AS id FROM r
), inserted AS (
    INSERT INTO drover_jobs (id, kind, queue, args, max_attempts, scheduled_at, state, priority,
                             pending_deps, has_dependents, workflow_id, tags, meta)
    OVERRIDING SYSTEM VALUE
    SELECT r.id, r.kind, r.queue, r.args, r.max_attempts, r.at,
           CASE WHEN r.pending_deps > 0 THEN 'pending'
                WHEN r.at > now() THEN 'scheduled'
                ELSE 'available' END::drover_job_state,
           r.priority, r.pending_deps, r.has_dependents, w.id, r.tags, r.meta
    FROM r, w
    ORDER BY r.ord
    RETURNING id, created_at, state, scheduled_at, queue
), edges AS (
    INSERT INTO drover_job_deps (job_id, depends_on)
    SELECT c.id, COALESCE(p.id, x.external)
    FROM unnest(%(child)s::bigint[], %(parent)s::bigint[], %(external)s::bigint[])
        AS x(child, parent, external)
    JOIN r c ON c.ord = x.child
    LEFT JOIN r p ON p.ord = x.parent
    ON CONFLICT DO NOTHING
), woken AS (
    SELECT count(pg_notify('drover', q.queue))
    FROM (SELECT DISTINCT queue FROM inserted WHERE state <> 'pending') q
    WHERE %(notify)s::boolean
)
SELECT i.id, i.created_at, i.state::text, i.scheduled_at, (SELECT id FROM w)
FROM r JOIN inserted i ON i.id = r.id
WHERE (SELECT count(*) FROM woken) >= 0
ORDER BY r.ord;

-- name: job_parent_results
-- What a job's dependencies left: id, state and result, in id order (the
-- order the workflow listed them in).
SELECT p.id, p.state::text, p.result::text
FROM drover_job_deps e
JOIN drover_jobs p ON p.id = e.depends_on
WHERE e.job_id = %(id)s
ORDER BY p.id;

-- name: workflow_jobs
-- Every job of a workflow, in id order, with its result and the ids it
-- depends on.
SELECT {{job_columns:j}}, j.result::text,
       COALESCE(ARRAY(SELECT e.depends_on FROM drover_job_deps e
                      WHERE e.job_id = j.id ORDER BY e.depends_on), '{}')
FROM drover_jobs j
WHERE j.workflow_id = %(id)s
ORDER BY j.id;

-- name: job_workflow_id
SELECT workflow_id FROM drover_jobs WHERE id = %(id)s;

-- name: workflow_list
-- The newest workflows (ids below %(before)s, when given), newest first, with
-- their first job's kind, when they were inserted, and their jobs by state.
-- The ids come from the workflow index read backwards, stopping after the
-- %(limit)s newest (a Unique over an index-only scan, whatever the history);
-- then only those workflows' rows are counted.
WITH newest AS (
    SELECT DISTINCT workflow_id AS id
    FROM drover_jobs
    WHERE workflow_id IS NOT NULL
      AND (%(before)s::bigint IS NULL OR workflow_id < %(before)s::bigint)
    ORDER BY workflow_id DESC
    LIMIT %(limit)s
)
SELECT n.id, min(j.created_at),
       (SELECT f.kind FROM drover_jobs f WHERE f.id = n.id),
       count(*),
       count(*) FILTER (WHERE j.state = 'completed'),
       count(*) FILTER (WHERE j.state = 'running'),
       count(*) FILTER (WHERE j.state IN ({{states:waiting}}) OR j.state = 'pending'),
       count(*) FILTER (WHERE j.state = 'dead'),
       count(*) FILTER (WHERE j.state = 'cancelled')
FROM newest n
JOIN drover_jobs j ON j.workflow_id = n.id
GROUP BY n.id
ORDER BY n.id DESC;
