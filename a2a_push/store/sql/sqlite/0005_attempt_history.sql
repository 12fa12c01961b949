-- The attempt history: every HTTP attempt of every delivery, written in the transaction
-- that records its outcome, and deleted with its delivery (ON DELETE CASCADE: the
-- writer's connection enforces foreign keys). The endpoint is the URL's origin alone
-- (scheme://host:port), never its path or query; the response is the first 1 KiB of
-- the answer's body, as received.
CREATE TABLE IF NOT EXISTS attempts (
    delivery_id TEXT NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    started_at  REAL NOT NULL,
    number      INTEGER NOT NULL,   -- the delivery's attempt count after it
    duration    REAL NOT NULL,
    endpoint    TEXT NOT NULL,
    verdict     TEXT NOT NULL,      -- delivered | retry | dead | gone
    status      INTEGER,
    error_class TEXT,
    error       TEXT,
    retry_at    REAL,
    response    BLOB,
    PRIMARY KEY (delivery_id, started_at, number)
) WITHOUT ROWID;
-- The config's endpoint when the delivery was queued, so deliveries can be listed by
-- endpoint; the deliveries already queued take their config's.
ALTER TABLE deliveries ADD COLUMN endpoint TEXT;
UPDATE deliveries SET endpoint = (SELECT c.endpoint FROM configs c WHERE c.key = deliveries.config_key);
