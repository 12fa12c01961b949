-- name: insert_subscription
INSERT INTO receiver_subscriptions
    (id, client_id, agent_url, task_id, token_digest, state, created_at, confirmed_at)
VALUES ($1, $2, $3, $4, $5, 'active', $6, $7)
ON CONFLICT (client_id, agent_url, task_id) WHERE state = 'active' DO NOTHING
RETURNING id;

-- name: confirm_subscription
UPDATE receiver_subscriptions SET confirmed_at = $1 WHERE id = $2 AND confirmed_at IS NULL;

-- name: active_subscription
SELECT * FROM receiver_subscriptions
WHERE client_id = $1 AND agent_url = $2 AND task_id = $3 AND state = 'active';

-- name: get_subscription
SELECT * FROM receiver_subscriptions WHERE id = $1;

-- name: subscription_by_token
SELECT * FROM receiver_subscriptions WHERE token_digest = $1;

-- name: subscriptions_for_task
SELECT * FROM receiver_subscriptions WHERE agent_url = $1 AND task_id = $2 ORDER BY created_at;

-- name: list_subscriptions
-- A page of the client's subscriptions, after the (created_at, id) of the last one of the
-- page before (the first page: after (-Infinity, '')): receiver_subscriptions_by_client's
-- range. LIMIT NULL: all of them.
SELECT * FROM receiver_subscriptions
WHERE client_id = $1 AND (created_at, id) > ($2, $3)
ORDER BY created_at, id LIMIT $4;

-- name: active_subscriptions_to_task
-- At most one row per agent: sorted by the caller (an ORDER BY here would make
-- receiver_subscriptions_by_client, already in that order, look cheaper to the planner).
SELECT * FROM receiver_subscriptions
WHERE client_id = $1 AND task_id = $2 AND state = 'active'
  AND ($3::text IS NULL OR agent_url = $3);

-- name: delete_subscription
UPDATE receiver_subscriptions SET state = 'deleted', deleted_at = $1
WHERE id = $2 AND state = 'active';

-- name: remove_subscription
DELETE FROM receiver_subscriptions WHERE id = $1;

-- name: is_seen
SELECT 1 FROM receiver_seen WHERE agent_url = $1 AND dedup_key = $2;

-- name: insert_seen
INSERT INTO receiver_seen (agent_url, dedup_key, received_at) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING RETURNING 1;

-- name: insert_notification
INSERT INTO receiver_notifications
    (agent_url, task_id, subscription_id, dedup_key, method, kind, seq, received_at, body)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id;

-- name: pending_fetches
SELECT agent_url, task_id, MAX(id) AS up_to, MIN(received_at) AS since
FROM receiver_notifications
WHERE NOT fetched GROUP BY agent_url, task_id ORDER BY MIN(id) LIMIT $1;

-- name: mark_fetched
UPDATE receiver_notifications SET fetched = TRUE
WHERE agent_url = $1 AND task_id = $2 AND id <= $3 AND NOT fetched;

-- The purges delete at most $2 rows each run (the caller repeats them until fewer go):
-- no one statement holds its locks long.

-- name: purge_seen
DELETE FROM receiver_seen WHERE (agent_url, dedup_key) IN
    (SELECT agent_url, dedup_key FROM receiver_seen WHERE received_at < $1 LIMIT $2);

-- name: purge_body_hashes
DELETE FROM receiver_seen WHERE (agent_url, dedup_key) IN
    (SELECT agent_url, dedup_key FROM receiver_seen
     WHERE received_at < $1 AND dedup_key LIKE 'sha256:%' LIMIT $2);

-- name: purge_notifications
-- Fetched or not: a task given up on (its GetTask kept failing) leaves them unfetched.
DELETE FROM receiver_notifications WHERE id IN
    (SELECT id FROM receiver_notifications WHERE received_at < $1 LIMIT $2);

-- name: purge_deleted_subscriptions
DELETE FROM receiver_subscriptions WHERE id IN
    (SELECT id FROM receiver_subscriptions
     WHERE state = 'deleted' AND deleted_at < $1 LIMIT $2);

-- name: purge_tasks
DELETE FROM receiver_tasks WHERE (agent_url, task_id) IN
    (SELECT t.agent_url, t.task_id FROM receiver_tasks t
     WHERE t.updated_at < $1
       AND NOT EXISTS (SELECT 1 FROM receiver_subscriptions s
                       WHERE s.agent_url = t.agent_url AND s.task_id = t.task_id)
     LIMIT $2);

-- name: purge_events
DELETE FROM receiver_events WHERE id IN
    (SELECT e.id FROM receiver_events e
     WHERE e.created_at < $1
       AND (EXISTS (SELECT 1 FROM receiver_events n
                    WHERE n.agent_url = e.agent_url AND n.task_id = e.task_id AND n.id > e.id)
            OR NOT EXISTS (SELECT 1 FROM receiver_tasks t
                           WHERE t.agent_url = e.agent_url AND t.task_id = e.task_id))
     LIMIT $2);

-- name: finished_tasks
-- The next batch of tasks in a terminal state stored before $1, oldest first, after the
-- (updated_at, agent_url, task_id) of the last one of the batch before.
SELECT agent_url, task_id, updated_at FROM receiver_tasks
WHERE final AND updated_at < $1 AND (updated_at, agent_url, task_id) > ($2, $3, $4)
ORDER BY updated_at, agent_url, task_id LIMIT $5;

-- name: end_subscriptions_to_tasks
-- The finished tasks' active subscriptions made before $4 end (as if unsubscribed).
UPDATE receiver_subscriptions s SET state = 'deleted', deleted_at = $1
FROM unnest($2::text[], $3::text[]) AS f(agent_url, task_id)
WHERE s.agent_url = f.agent_url AND s.task_id = f.task_id AND s.state = 'active'
  AND s.created_at < $4;

-- name: lock_task
-- Whether the fetched task ($3) is byte for byte the stored one is decided here, under
-- the row lock: then nothing is stored or logged (an unchanged snapshot is no event).
SELECT final, status_timestamp, generation, snapshot = $3 AS unchanged FROM receiver_tasks
WHERE agent_url = $1 AND task_id = $2 FOR UPDATE;

-- name: raise_generation
-- An unchanged snapshot from a later fetch: no new event, but an older fetch may no
-- longer overwrite it.
UPDATE receiver_tasks SET generation = $3
WHERE agent_url = $1 AND task_id = $2 AND generation < $3;

-- name: task_version
SELECT final FROM receiver_tasks WHERE agent_url = $1 AND task_id = $2;

-- name: get_task
SELECT * FROM receiver_tasks WHERE agent_url = $1 AND task_id = $2;

-- name: upsert_task
INSERT INTO receiver_tasks (agent_url, task_id, context_id, state, final, status_timestamp,
                            generation, snapshot, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (agent_url, task_id) DO UPDATE SET
    context_id = EXCLUDED.context_id, state = EXCLUDED.state, final = EXCLUDED.final,
    status_timestamp = EXCLUDED.status_timestamp, generation = EXCLUDED.generation,
    snapshot = EXCLUDED.snapshot, updated_at = EXCLUDED.updated_at;

-- name: insert_event
INSERT INTO receiver_events (agent_url, task_id, kind, data, created_at)
VALUES ($1, $2, $3, $4, $5) RETURNING id;

-- name: snapshots_for_client
SELECT t.* FROM receiver_tasks t
WHERE ($2::text IS NULL OR t.context_id = $2)
  AND EXISTS (SELECT 1 FROM receiver_subscriptions s
              WHERE s.client_id = $1 AND s.agent_url = t.agent_url AND s.task_id = t.task_id
                AND s.state = 'active')
ORDER BY t.updated_at DESC LIMIT $3;

-- name: events_for_client
SELECT e.* FROM receiver_events e
WHERE e.id > $2
  AND EXISTS (SELECT 1 FROM receiver_subscriptions s
              WHERE s.client_id = $1 AND s.agent_url = e.agent_url AND s.task_id = e.task_id
                AND s.state = 'active')
ORDER BY e.id LIMIT $3;

-- name: latest_event_id
SELECT COALESCE(MAX(id), 0) FROM receiver_events;
