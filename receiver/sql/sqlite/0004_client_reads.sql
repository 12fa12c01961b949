-- A client's active subscription(s) to one task, whatever the agent: what GET /tasks/{id}
-- reads (subscriptions_one_active leads with the agent, so without it the lookup would
-- walk every active subscription of the client).
CREATE INDEX subscriptions_active_by_task
    ON subscriptions (client_id, task_id) WHERE state = 'active';
-- GET /subscriptions pages in (created_at, id) order: with id in the index, a page reads
-- its own rows only, in order, never sorting the rest of the client's list.
DROP INDEX subscriptions_by_client;
CREATE INDEX subscriptions_by_client ON subscriptions (client_id, created_at, id);
