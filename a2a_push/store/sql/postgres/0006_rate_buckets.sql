-- Per-endpoint token buckets for the delivery rate limit, shared by every process on
-- this database: a dispatcher takes tokens from its endpoint's row (in small batches)
-- before it sends. One row per rate-limited endpoint (scheme://host:port). Times are
-- epoch seconds on the database server's clock.
CREATE TABLE rate_buckets (
    endpoint   TEXT PRIMARY KEY,
    tokens     DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    granted    INTEGER NOT NULL DEFAULT 0
);
