-- The kinds each live client registers (`drover enqueue` checks a kind
-- against them, and the status page can list them).
--
-- Online-safe: a nullable column without a default rewrites nothing. The
-- previous release's refresh does not name it (its upsert leaves it as it
-- was, NULL on its own rows), and NULL means "this client did not say":
-- `drover enqueue` checks kinds only against clients that said.
ALTER TABLE drover_clients ADD COLUMN kinds text[];
