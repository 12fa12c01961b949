-- Same tables as the SQLite backend. Times are Unix seconds (double precision), as the
-- store contract uses them; ids sort bytewise (COLLATE "C") so keyset paging agrees
-- with the other backends whatever the database's collation.

-- Push notification configs. "key" is internal and global; "id" is the A2A config id,
-- unique within (task_id, owner).
CREATE TABLE configs (
    key              TEXT PRIMARY KEY,
    id               TEXT COLLATE "C" NOT NULL,
    task_id          TEXT NOT NULL,
    owner            TEXT NOT NULL,
    tenant           TEXT,
    url              TEXT NOT NULL,
    endpoint         TEXT NOT NULL,   -- scheme://host:port of url
    auth_scheme      TEXT,
    secrets          TEXT,            -- token + credentials, sealed by SecretBox
    protocol_version TEXT NOT NULL,
    enabled          BOOLEAN NOT NULL DEFAULT TRUE,
    disabled_reason  TEXT,
    failing_since    DOUBLE PRECISION,
    created_at       DOUBLE PRECISION NOT NULL,
    UNIQUE (task_id, owner, id)
);
CREATE INDEX configs_by_task ON configs (task_id);

-- Per-task event sequence numbers (the JWT "seq" claim).
CREATE TABLE task_seq (
    task_id TEXT PRIMARY KEY,
    seq     BIGINT NOT NULL
);

CREATE TABLE deliveries (
    id              TEXT COLLATE "C" PRIMARY KEY,  -- the webhook-id, stable across retries
    config_key      TEXT NOT NULL,
    task_id         TEXT NOT NULL,
    seq             BIGINT NOT NULL,
    kind            TEXT NOT NULL,
    body            BYTEA NOT NULL,
    state           TEXT NOT NULL,      -- pending | delivered | dead
    attempts        INTEGER NOT NULL DEFAULT 0,  -- HTTP attempts made
    rounds          INTEGER NOT NULL DEFAULT 0,  -- claims that ended in a retry
    next_attempt_at DOUBLE PRECISION NOT NULL,
    created_at      DOUBLE PRECISION NOT NULL,
    updated_at      DOUBLE PRECISION NOT NULL,
    last_status     INTEGER,
    last_error      TEXT
);
CREATE INDEX deliveries_pending_by_lane
    ON deliveries (config_key, task_id, seq) WHERE state = 'pending';
CREATE INDEX deliveries_by_task ON deliveries (task_id, id);
CREATE INDEX deliveries_by_state ON deliveries (state, id);
CREATE INDEX deliveries_by_state_age ON deliveries (state, updated_at);
CREATE INDEX deliveries_by_config ON deliveries (config_key, id);

-- One row per (config, task) with pending work. head_id is the lowest-seq pending
-- delivery: the only one that may be in flight, which is what keeps per-lane FIFO.
-- due_at is when the lane may be claimed next. A claim sets lease_owner and moves
-- due_at to the lease's expiry, so while lease_owner is set due_at is the lease expiry
-- and a crashed worker's lanes come back by themselves when it passes. Claims lock
-- lane rows with FOR UPDATE SKIP LOCKED, so two workers never lease one lane at once.
CREATE TABLE lanes (
    config_key  TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    head_id     TEXT COLLATE "C" NOT NULL,
    due_at      DOUBLE PRECISION NOT NULL,
    lease_owner TEXT,
    endpoint    TEXT NOT NULL,   -- the config's, for per-endpoint claim limits
    PRIMARY KEY (config_key, task_id)
);
CREATE INDEX lanes_by_due ON lanes (due_at);
