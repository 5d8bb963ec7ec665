-- Which worker holds (or last held) a job's lease, for operators: the claim
-- writes "<client id> (pid <pid> on <host>)". Informational only; the fence is
-- still (id, attempt, state = 'running'). Adding a nullable column without a
-- default rewrites nothing.
ALTER TABLE drover_jobs ADD COLUMN leased_by text;
