-- Connection poolers (PgBouncer in transaction mode, ADR 0040).

-- name: pooler_backend_pid
-- The server process behind this connection. A direct connection learns the
-- same pid from the startup handshake (BackendKeyData); a pooler hands its
-- clients a key of its own, so the two differ behind one.
SELECT pg_backend_pid();
