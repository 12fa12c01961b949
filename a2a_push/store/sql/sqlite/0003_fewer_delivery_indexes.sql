-- Every delivery row is inserted once and changes state once or more; each index on it
-- costs pages written on every one of those, and the commit's cost is mostly those
-- pages. Two indexes did not pay for themselves:
-- * deliveries_by_state_age served only the retention purge, which now walks
--   deliveries_by_state (state, id): ids are time-ordered, so it meets the oldest rows
--   first and stops at its LIMIT.
-- * deliveries_by_config: a config belongs to one task, so listing a config's deliveries
--   walks deliveries_by_task for that task and filters on config_key.
DROP INDEX IF EXISTS deliveries_by_state_age;
DROP INDEX IF EXISTS deliveries_by_config;
