-- Progress and metadata reported by running handlers (ADR 0032).

-- name: job_report_progress
-- Every report of one round in one statement: a JSON array of
-- [id, attempt, has_progress, progress, message, meta_patch] arrays, one per
-- execution whose report changed. Each is fenced on its execution (id,
-- attempt, state 'running'): a stale attempt's report changes nothing. A
-- report without progress leaves progress as it is; a metadata patch is
-- merged with || (its top-level keys replace the stored ones). Returns the
-- ids written.
WITH r AS (
    SELECT (e.v->>0)::bigint AS id, (e.v->>1)::integer AS attempt,
           (e.v->>2)::boolean AS reported, (e.v->>3)::real AS progress,
           e.v->>4 AS message, e.v->5 AS patch
    FROM jsonb_array_elements(%s::jsonb) AS e(v)
)
UPDATE drover_jobs j
SET progress = CASE WHEN r.reported THEN r.progress ELSE j.progress END,
    progress_message = CASE WHEN r.reported THEN r.message ELSE j.progress_message END,
    meta = CASE WHEN jsonb_typeof(r.patch) = 'object' THEN j.meta || r.patch ELSE j.meta END
FROM r
-- By primary key, as the completion statements find their rows.
WHERE j.id = r.id AND j.attempt = r.attempt AND (j.state = 'running') IS TRUE
RETURNING j.id;
