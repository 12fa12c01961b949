-- The gateway's state, in the outbox's database and schema: which agent owns each task,
-- and the signing keys every replica signs with. Versions are recorded in
-- gateway_schema_migrations, not the outbox's schema_migrations. IF NOT EXISTS: a
-- database written before the gateway's schema was versioned already has these tables
-- (and its rows); this only records version 1.
CREATE TABLE IF NOT EXISTS gateway_tasks (
    task_id    TEXT PRIMARY KEY,
    agent_id   TEXT NOT NULL,
    context_id TEXT,
    status     TEXT,
    updated_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS gateway_tasks_by_age ON gateway_tasks (updated_at);
CREATE TABLE IF NOT EXISTS gateway_signing_keys (
    kid        TEXT PRIMARY KEY,
    alg        TEXT NOT NULL,
    private    TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    retired_at DOUBLE PRECISION
);
