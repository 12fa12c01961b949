-- GET /tasks pages newest first: walking this index it reads the page's rows only,
-- never sorting every task (the same order within one context).
CREATE INDEX tasks_by_update ON tasks (updated_at);
DROP INDEX tasks_by_context;
CREATE INDEX tasks_by_context ON tasks (context_id, updated_at);
-- The maintenance finds tasks finished before the retention period, oldest first, to
-- end their subscriptions (a batch at a time, resuming after the last one).
CREATE INDEX tasks_finished ON tasks (updated_at, agent_url, task_id) WHERE final = 1;
-- Notifications past retention are purged fetched or not (a task given up on leaves
-- its notifications unfetched).
DROP INDEX notifications_by_time;
CREATE INDEX notifications_by_time ON notifications (received_at);
