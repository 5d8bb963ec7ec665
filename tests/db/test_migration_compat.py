"""Claims of the migration audit in docs/upgrading.md that are checked on today's schema (ADR 0038).

0011 replaced the unique-key index (``drover_jobs_unique_active_idx``) with a
``_v2`` whose predicate also holds ``pending``. The release before 0011 names
its arbiter by inference, with the old index's columns and predicate, so that
statement must still infer an index on the migrated schema.
"""

from __future__ import annotations

from jobdb import Conn

# The release before 0011's arbiter, as its job_insert statement wrote it
# (sql/queries/jobs.sql at 68fa62a, {{states:active}} expanded as it was then).
PREVIOUS_RELEASE_INSERT = """
INSERT INTO drover_jobs (kind, queue, args, unique_key)
VALUES ('compat', 'default', '{}', %s)
ON CONFLICT (queue, kind, unique_key)
    WHERE unique_key IS NOT NULL
      AND state IN ('available', 'scheduled', 'retryable', 'running')
    DO NOTHING
RETURNING id
"""


def test_the_pre_0011_unique_key_arbiter_still_infers_todays_index(conn: Conn) -> None:
    first = conn.execute(PREVIOUS_RELEASE_INSERT, ("k1",)).fetchall()
    again = conn.execute(PREVIOUS_RELEASE_INSERT, ("k1",)).fetchall()
    other = conn.execute(PREVIOUS_RELEASE_INSERT, ("k2",)).fetchall()
    assert len(first) == 1
    assert again == []  # the duplicate is skipped, not an error
    assert len(other) == 1
    row = conn.execute("SELECT count(*) FROM drover_jobs WHERE kind = 'compat'").fetchone()
    assert row == (2,)


def test_the_unique_key_arbiter_covers_pending_jobs(conn: Conn) -> None:
    # A pending job (made by today's release) holds its key against the
    # previous release's insert too: the inferred index is the v2 one.
    conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args, unique_key, state) "
        "VALUES ('compat', 'default', '{}', 'held', 'pending')"
    )
    assert conn.execute(PREVIOUS_RELEASE_INSERT, ("held",)).fetchall() == []
