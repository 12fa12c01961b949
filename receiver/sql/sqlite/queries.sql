-- name: insert_subscription
INSERT INTO subscriptions
    (id, client_id, agent_url, task_id, token_digest, state, created_at, confirmed_at)
VALUES (:id, :client_id, :agent_url, :task_id, :token_digest, 'active', :created_at,
        :confirmed_at);

-- name: confirm_subscription
UPDATE subscriptions SET confirmed_at = ? WHERE id = ? AND confirmed_at IS NULL;

-- name: active_subscription
SELECT * FROM subscriptions
WHERE client_id = ? AND agent_url = ? AND task_id = ? AND state = 'active';

-- name: get_subscription
SELECT * FROM subscriptions WHERE id = ?;

-- name: subscription_by_token
SELECT * FROM subscriptions WHERE token_digest = ?;

-- name: subscriptions_for_task
SELECT * FROM subscriptions WHERE agent_url = ? AND task_id = ? ORDER BY created_at;

-- name: list_subscriptions
-- A page of the client's subscriptions, after the (created_at, id) of the last one of the
-- page before (the first page: after (-inf, '')): subscriptions_by_client's range.
SELECT * FROM subscriptions
WHERE client_id = :client_id AND (created_at, id) > (:after_created_at, :after_id)
ORDER BY created_at, id LIMIT :limit;

-- name: active_subscriptions_to_task
-- At most one row per agent: sorted by the caller. Without statistics (no ANALYZE) SQLite
-- would rather walk subscriptions_by_client for its order, every active subscription of
-- the client: the index is named.
SELECT * FROM subscriptions INDEXED BY subscriptions_active_by_task
WHERE client_id = :client_id AND task_id = :task_id AND state = 'active'
  AND (:agent_url IS NULL OR agent_url = :agent_url);

-- name: delete_subscription
UPDATE subscriptions SET state = 'deleted', deleted_at = ? WHERE id = ? AND state = 'active';

-- name: remove_subscription
DELETE FROM subscriptions WHERE id = ?;

-- name: is_seen
SELECT 1 FROM seen WHERE agent_url = ? AND dedup_key = ?;

-- name: insert_seen
INSERT OR IGNORE INTO seen (agent_url, dedup_key, received_at) VALUES (?, ?, ?);

-- name: insert_notification
INSERT INTO notifications
    (agent_url, task_id, subscription_id, dedup_key, method, kind, seq, received_at, body)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: pending_fetches
SELECT agent_url, task_id, MAX(id) AS up_to, MIN(received_at) AS since
FROM notifications WHERE fetched = 0 GROUP BY agent_url, task_id ORDER BY MIN(id) LIMIT ?;

-- name: mark_fetched
UPDATE notifications SET fetched = 1
WHERE agent_url = ? AND task_id = ? AND id <= ? AND fetched = 0;

-- The purges delete at most :limit rows each run (the caller repeats them, a
-- transaction each, until fewer go): no one transaction holds the writer long.

-- name: purge_seen
DELETE FROM seen WHERE (agent_url, dedup_key) IN
    (SELECT agent_url, dedup_key FROM seen WHERE received_at < ? LIMIT ?);

-- name: purge_body_hashes
DELETE FROM seen WHERE (agent_url, dedup_key) IN
    (SELECT agent_url, dedup_key FROM seen
     WHERE received_at < ? AND dedup_key LIKE 'sha256:%' LIMIT ?);

-- name: purge_notifications
-- Fetched or not: a task given up on (its GetTask kept failing) leaves them unfetched.
DELETE FROM notifications WHERE id IN
    (SELECT id FROM notifications WHERE received_at < ? LIMIT ?);

-- name: purge_deleted_subscriptions
DELETE FROM subscriptions WHERE id IN
    (SELECT id FROM subscriptions WHERE state = 'deleted' AND deleted_at < ? LIMIT ?);

-- name: purge_tasks
DELETE FROM tasks WHERE rowid IN
    (SELECT rowid FROM tasks
     WHERE updated_at < ?
       AND NOT EXISTS (SELECT 1 FROM subscriptions s
                       WHERE s.agent_url = tasks.agent_url AND s.task_id = tasks.task_id)
     LIMIT ?);

-- name: purge_events
DELETE FROM events WHERE id IN
    (SELECT id FROM events
     WHERE created_at < ?
       AND (EXISTS (SELECT 1 FROM events n
                    WHERE n.agent_url = events.agent_url AND n.task_id = events.task_id
                      AND n.id > events.id)
            OR NOT EXISTS (SELECT 1 FROM tasks t
                           WHERE t.agent_url = events.agent_url AND t.task_id = events.task_id))
     LIMIT ?);

-- name: finished_tasks
-- The next batch of tasks in a terminal state stored before :before, oldest first, after
-- the (updated_at, agent_url, task_id) of the last one of the batch before.
SELECT agent_url, task_id, updated_at FROM tasks INDEXED BY tasks_finished
WHERE final = 1 AND updated_at < :before
  AND (updated_at, agent_url, task_id) > (:after_updated_at, :after_agent_url, :after_task_id)
ORDER BY updated_at, agent_url, task_id LIMIT :limit;

-- name: end_subscriptions_to_task
-- A finished task's active subscriptions made before :before end (as if unsubscribed).
UPDATE subscriptions SET state = 'deleted', deleted_at = :now
WHERE agent_url = :agent_url AND task_id = :task_id AND state = 'active'
  AND created_at < :before;

-- name: get_task
SELECT * FROM tasks WHERE agent_url = ? AND task_id = ?;

-- name: task_version
SELECT final, status_timestamp, generation FROM tasks WHERE agent_url = ? AND task_id = ?;

-- name: current_task
-- Read inside save_snapshot's write transaction: what supersedes() compares, and whether
-- the fetched task is byte for byte the stored one (then nothing is stored or logged).
SELECT final, status_timestamp, generation, snapshot = :snapshot AS unchanged
FROM tasks WHERE agent_url = :agent_url AND task_id = :task_id;

-- name: raise_generation
-- An unchanged snapshot from a later fetch: no new event, but an older fetch may no
-- longer overwrite it.
UPDATE tasks SET generation = :generation
WHERE agent_url = :agent_url AND task_id = :task_id AND generation < :generation;

-- name: upsert_task
INSERT INTO tasks (agent_url, task_id, context_id, state, final, status_timestamp, generation,
                   snapshot, updated_at)
VALUES (:agent_url, :task_id, :context_id, :state, :final, :status_timestamp, :generation,
        :snapshot, :updated_at)
ON CONFLICT (agent_url, task_id) DO UPDATE SET
    context_id = excluded.context_id, state = excluded.state, final = excluded.final,
    status_timestamp = excluded.status_timestamp, generation = excluded.generation,
    snapshot = excluded.snapshot, updated_at = excluded.updated_at;

-- name: insert_event
INSERT INTO events (agent_url, task_id, kind, data, created_at) VALUES (?, ?, ?, ?, ?);

-- name: snapshots_for_client
SELECT t.* FROM tasks t
WHERE (:context_id IS NULL OR t.context_id = :context_id)
  AND EXISTS (SELECT 1 FROM subscriptions s
              WHERE s.client_id = :client_id AND s.agent_url = t.agent_url
                AND s.task_id = t.task_id
                AND s.state = 'active')
ORDER BY t.updated_at DESC LIMIT :limit;

-- name: events_for_client
SELECT e.* FROM events e
WHERE e.id > :after
  AND EXISTS (SELECT 1 FROM subscriptions s
              WHERE s.client_id = :client_id AND s.agent_url = e.agent_url
                AND s.task_id = e.task_id
                AND s.state = 'active')
ORDER BY e.id LIMIT :limit;

-- name: latest_event_id
SELECT COALESCE(MAX(id), 0) FROM events;
