-- Idempotency keys of publishes: a retried publish returns the first one's result.
CREATE TABLE idempotency_keys (
    key        TEXT PRIMARY KEY,
    seq        BIGINT NOT NULL,
    ids        TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX idempotency_keys_by_time ON idempotency_keys (created_at);
