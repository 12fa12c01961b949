-- What the replicas sharing this state record for each other: the issuer the last
-- gateway to start signed as (a replica signing as another warns at start-up).
CREATE TABLE IF NOT EXISTS gateway_meta (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at REAL NOT NULL
);
