-- When the agent accepted the subscription's push config. Every process reads it, so a
-- repeated subscribe landing in another worker (or after a restart) knows the row is
-- real. Rows from before this column stay NULL: past the time an agent call can take,
-- an unconfirmed row counts as confirmed anyway.
ALTER TABLE subscriptions ADD COLUMN confirmed_at REAL;
