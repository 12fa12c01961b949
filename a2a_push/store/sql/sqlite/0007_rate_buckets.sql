-- Per-endpoint token buckets for the delivery rate limit, shared by every process on
-- this file: a dispatcher takes tokens from its endpoint's row (in small batches) before
-- it sends. One row per rate-limited endpoint (scheme://host:port); epoch seconds.
CREATE TABLE IF NOT EXISTS rate_buckets (
    endpoint   TEXT PRIMARY KEY,
    tokens     REAL NOT NULL,
    updated_at REAL NOT NULL,
    granted    INTEGER NOT NULL DEFAULT 0
);
