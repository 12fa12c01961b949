-- GET /tasks pages newest first: walking this index it reads the page's rows only,
-- never sorting every task (the same order within one context).
CREATE INDEX receiver_tasks_by_update ON receiver_tasks (updated_at);
DROP INDEX receiver_tasks_by_context;
CREATE INDEX receiver_tasks_by_context ON receiver_tasks (context_id, updated_at);
-- The maintenance finds tasks finished before the retention period, oldest first, to
-- end their subscriptions (a batch at a time, resuming after the last one).
CREATE INDEX receiver_tasks_finished
    ON receiver_tasks (updated_at, agent_url, task_id) WHERE final;
-- Notifications past retention are purged fetched or not (a task given up on leaves
-- its notifications unfetched).
DROP INDEX receiver_notifications_by_time;
CREATE INDEX receiver_notifications_by_time ON receiver_notifications (received_at);
