-- Progress, metadata and tags (ADR 0032).
--
-- progress and progress_message are what the handler last reported with
-- Job.set_progress (NULL until it reports); meta is a JSON object given at
-- insert and merged into by Job.update_meta; tags are short labels given at
-- insert, filtered on by the inspector, the CLI and the status page. The
-- defaults are constants, so adding the columns rewrites no row.
ALTER TABLE drover_jobs ADD COLUMN progress real;
ALTER TABLE drover_jobs ADD COLUMN progress_message text;
ALTER TABLE drover_jobs ADD COLUMN meta jsonb NOT NULL DEFAULT '{}';
ALTER TABLE drover_jobs ADD COLUMN tags text[] NOT NULL DEFAULT '{}';
-- A tag filter is "tags @> ARRAY[...]" (every tag named), which a GIN index
-- serves. Partial: a job without tags (most of them) adds no entry, so the
-- claim and the completion, which move every row to a new version, pay
-- nothing for the index unless the job has tags.
CREATE INDEX drover_jobs_tags_idx ON drover_jobs USING gin (tags) WHERE tags <> '{}';
