-- What the connected role may do, asked of PostgreSQL's privilege functions
-- before the role tries (ADR 0054): a started client asks once whether it
-- may claim and run jobs, the status page once which buttons it may offer.
-- Each answer reads the catalogs only, never a drover row. Every privilege
-- is asked on its own: has_table_privilege with a list is true when any one
-- of them is held.

-- name: privileges_to_work
-- What a started client writes and reads on every round, each missing
-- privilege named as PostgreSQL would grant it: the claim and the outcomes'
-- columns of drover_jobs, the queues and gates the claim reads, the clients
-- registry. The worker role of `drover roles` holds all of them.
SELECT current_user::text, ARRAY(
    SELECT need FROM (VALUES
        (1, 'UPDATE (state, attempt, leased_until, leased_by, attempted_at, errors, result, '
            'finalized_at) ON drover_jobs',
         has_column_privilege('drover_jobs', 'state', 'UPDATE')
         AND has_column_privilege('drover_jobs', 'attempt', 'UPDATE')
         AND has_column_privilege('drover_jobs', 'leased_until', 'UPDATE')
         AND has_column_privilege('drover_jobs', 'leased_by', 'UPDATE')
         AND has_column_privilege('drover_jobs', 'attempted_at', 'UPDATE')
         AND has_column_privilege('drover_jobs', 'errors', 'UPDATE')
         AND has_column_privilege('drover_jobs', 'result', 'UPDATE')
         AND has_column_privilege('drover_jobs', 'finalized_at', 'UPDATE')),
        (2, 'SELECT ON drover_jobs', has_table_privilege('drover_jobs', 'SELECT')),
        (3, 'SELECT ON drover_queues', has_table_privilege('drover_queues', 'SELECT')),
        (4, 'SELECT ON drover_gates', has_table_privilege('drover_gates', 'SELECT')),
        (5, 'SELECT, INSERT, UPDATE, DELETE ON drover_clients',
         has_table_privilege('drover_clients', 'SELECT')
         AND has_table_privilege('drover_clients', 'INSERT')
         AND has_table_privilege('drover_clients', 'UPDATE')
         AND has_table_privilege('drover_clients', 'DELETE'))
    ) AS p(n, need, granted)
    WHERE NOT p.granted
    ORDER BY p.n
);

-- name: privileges_of_page
-- The status page's three kinds of write: retry and cancel (the columns the
-- operator's statements set on drover_jobs), pause and resume (drover_queues),
-- set and clear a limit (drover_limits, whose trigger rebuilds drover_gates).
SELECT current_user::text,
       has_column_privilege('drover_jobs', 'state', 'UPDATE')
       AND has_column_privilege('drover_jobs', 'attempt', 'UPDATE')
       AND has_column_privilege('drover_jobs', 'finalized_at', 'UPDATE')
       AND has_column_privilege('drover_jobs', 'leased_until', 'UPDATE')
       AND has_column_privilege('drover_jobs', 'cancel_request', 'UPDATE'),
       has_table_privilege('drover_queues', 'INSERT')
       AND has_table_privilege('drover_queues', 'UPDATE'),
       has_table_privilege('drover_limits', 'INSERT')
       AND has_table_privilege('drover_limits', 'UPDATE')
       AND has_table_privilege('drover_limits', 'DELETE')
       AND has_table_privilege('drover_gates', 'INSERT')
       AND has_table_privilege('drover_gates', 'DELETE');
