-- The receiver's schema (SQLite).
CREATE TABLE subscriptions (
    id           TEXT PRIMARY KEY,
    client_id    TEXT NOT NULL,
    agent_url    TEXT NOT NULL,
    task_id      TEXT NOT NULL,
    token_digest TEXT NOT NULL UNIQUE,
    state        TEXT NOT NULL,
    created_at   REAL NOT NULL,
    deleted_at   REAL
);
CREATE INDEX subscriptions_by_task ON subscriptions (agent_url, task_id);
CREATE INDEX subscriptions_by_client ON subscriptions (client_id, created_at);
-- At most one active subscription per client and task.
CREATE UNIQUE INDEX subscriptions_one_active
    ON subscriptions (client_id, agent_url, task_id) WHERE state = 'active';

-- Webhook ids already accepted, per agent: the replay check.
CREATE TABLE seen (
    agent_url   TEXT NOT NULL,
    dedup_key   TEXT NOT NULL,
    received_at REAL NOT NULL,
    PRIMARY KEY (agent_url, dedup_key)
) WITHOUT ROWID;
CREATE INDEX seen_by_time ON seen (received_at);

CREATE TABLE notifications (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_url       TEXT NOT NULL,
    task_id         TEXT NOT NULL,
    subscription_id TEXT NOT NULL,
    dedup_key       TEXT NOT NULL,
    method          TEXT NOT NULL,
    kind            TEXT NOT NULL,
    seq             INTEGER,
    received_at     REAL NOT NULL,
    body            BLOB NOT NULL,
    fetched         INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX notifications_pending ON notifications (agent_url, task_id, id) WHERE fetched = 0;
CREATE INDEX notifications_by_time ON notifications (received_at) WHERE fetched = 1;

CREATE TABLE tasks (
    agent_url        TEXT NOT NULL,
    task_id          TEXT NOT NULL,
    context_id       TEXT,
    state            TEXT,
    final            INTEGER NOT NULL,
    status_timestamp TEXT,
    generation       INTEGER NOT NULL,
    snapshot         TEXT NOT NULL,
    updated_at       REAL NOT NULL,
    PRIMARY KEY (agent_url, task_id)
);
CREATE INDEX tasks_by_context ON tasks (context_id);

CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_url  TEXT NOT NULL,
    task_id    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    data       TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX events_by_task ON events (agent_url, task_id, id);
