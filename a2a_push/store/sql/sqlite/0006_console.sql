-- The console's reads: attempts by time (the overview's chart, the endpoints page) and
-- deliveries by endpoint (a filter of the deliveries page), in keyset order.
CREATE INDEX IF NOT EXISTS attempts_by_time ON attempts (started_at);
CREATE INDEX IF NOT EXISTS deliveries_by_endpoint ON deliveries (endpoint, id);
