-- The gateway's state in its own SQLite file (<outbox>-gateway.db): which agent owns each
-- task, and the signing keys. IF NOT EXISTS: a file written before the gateway's schema
-- was versioned already has these tables (and its rows); this only records version 1.
CREATE TABLE IF NOT EXISTS gateway_tasks (
    task_id    TEXT PRIMARY KEY,
    agent_id   TEXT NOT NULL,
    context_id TEXT,
    status     TEXT,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS gateway_tasks_by_age ON gateway_tasks (updated_at);
CREATE TABLE IF NOT EXISTS gateway_signing_keys (
    kid        TEXT PRIMARY KEY,
    alg        TEXT NOT NULL,
    private    TEXT NOT NULL,
    created_at REAL NOT NULL,
    retired_at REAL
);
