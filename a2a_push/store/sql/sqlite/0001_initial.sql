-- Push notification configs. "key" is internal and global; "id" is the A2A config id,
-- unique within (task_id, owner).
CREATE TABLE IF NOT EXISTS configs (
    key              TEXT PRIMARY KEY,
    id               TEXT NOT NULL,
    task_id          TEXT NOT NULL,
    owner            TEXT NOT NULL,
    tenant           TEXT,
    url              TEXT NOT NULL,
    endpoint         TEXT NOT NULL,   -- scheme://host:port of url
    auth_scheme      TEXT,
    secrets          TEXT,            -- token + credentials, sealed by SecretBox
    protocol_version TEXT NOT NULL,
    enabled          INTEGER NOT NULL DEFAULT 1,
    disabled_reason  TEXT,
    failing_since    REAL,
    created_at       REAL NOT NULL,
    UNIQUE (task_id, owner, id)
);
CREATE INDEX IF NOT EXISTS configs_by_task ON configs (task_id);

-- Per-task event sequence numbers (the JWT "seq" claim).
CREATE TABLE IF NOT EXISTS task_seq (
    task_id TEXT PRIMARY KEY,
    seq     INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS deliveries (
    id              TEXT PRIMARY KEY,   -- the webhook-id, stable across retries
    config_key      TEXT NOT NULL,
    task_id         TEXT NOT NULL,
    seq             INTEGER NOT NULL,
    kind            TEXT NOT NULL,
    body            BLOB NOT NULL,
    state           TEXT NOT NULL,      -- pending | delivered | dead
    attempts        INTEGER NOT NULL DEFAULT 0,  -- HTTP attempts made
    rounds          INTEGER NOT NULL DEFAULT 0,  -- claims that ended in a retry
    next_attempt_at REAL NOT NULL,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL,
    last_status     INTEGER,
    last_error      TEXT
);
CREATE INDEX IF NOT EXISTS deliveries_pending_by_lane
    ON deliveries (config_key, task_id, seq) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS deliveries_by_task ON deliveries (task_id, id);
CREATE INDEX IF NOT EXISTS deliveries_by_state ON deliveries (state, id);
CREATE INDEX IF NOT EXISTS deliveries_by_state_age ON deliveries (state, updated_at);
CREATE INDEX IF NOT EXISTS deliveries_by_config ON deliveries (config_key, id);

-- One row per (config, task) with pending work. head_id is the lowest-seq pending
-- delivery: the only one that may be in flight, which is what keeps per-lane FIFO.
-- due_at is when the lane may be claimed next; a claim moves it to the lease expiry,
-- so a crashed worker's lanes come back by themselves.
CREATE TABLE IF NOT EXISTS lanes (
    config_key  TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    head_id     TEXT NOT NULL,
    due_at      REAL NOT NULL,
    lease_owner TEXT,
    endpoint    TEXT NOT NULL,   -- the config's, for per-endpoint claim limits
    PRIMARY KEY (config_key, task_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lanes_by_due ON lanes (due_at);
