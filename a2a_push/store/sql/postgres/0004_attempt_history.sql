-- The attempt history: every HTTP attempt of every delivery, written in the transaction
-- that records its outcome (in the statement that takes the tasks' locks: no round trip
-- of its own), and deleted with its delivery (purge_deliveries). The endpoint is the
-- URL's origin alone (scheme://host:port), never its path or query; the response is the
-- first 1 KiB of the answer's body, as received.
CREATE TABLE attempts (
    delivery_id TEXT COLLATE "C" NOT NULL,
    started_at  DOUBLE PRECISION NOT NULL,
    number      INTEGER NOT NULL,   -- the delivery's attempt count after it
    duration    DOUBLE PRECISION NOT NULL,
    endpoint    TEXT NOT NULL,
    verdict     TEXT NOT NULL,      -- delivered | retry | dead | gone
    status      INTEGER,
    error_class TEXT,
    error       TEXT,
    retry_at    DOUBLE PRECISION,
    response    BYTEA,
    PRIMARY KEY (delivery_id, started_at, number)
);
-- The config's endpoint when the delivery was queued, so deliveries can be listed by
-- endpoint; the deliveries already queued take their config's.
ALTER TABLE deliveries ADD COLUMN endpoint TEXT;
UPDATE deliveries d SET endpoint = c.endpoint FROM configs c WHERE c.key = d.config_key;
