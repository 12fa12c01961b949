-- Every delivery row is inserted once and changes state once or more; each index entry
-- that changes costs pages written, and a commit's cost is mostly those pages.
-- * deliveries_by_state_age (state, updated_at) changed on every insert and every state
--   change. The retention purge, its only user, looks at finished rows alone: the
--   partial index below leaves pending rows out, and a finished row's entry lands at the
--   end of the index (updated_at is "now"), so it is a cheap append.
-- * deliveries_by_config: a config belongs to one task, so listing a config's deliveries
--   walks deliveries_by_task for that task and filters on config_key.
DROP INDEX IF EXISTS deliveries_by_state_age;
DROP INDEX IF EXISTS deliveries_by_config;
CREATE INDEX IF NOT EXISTS deliveries_finished_by_age
    ON deliveries (state, updated_at) WHERE state != 'pending';
