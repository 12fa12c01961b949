-- Named queries of the gateway's state on SQLite (a2a_push/gateway/state.py). Where a
-- name is in the PostgreSQL file too, its parameters are the same (?N here is $N there);
-- a list parameter (PostgreSQL's text[]) is a JSON array here, read with json_each.

-- ---- tasks --------------------------------------------------------------------------

-- name: claim_task
-- One statement: the owner check, the upsert and the record read are atomic. The
-- first agent to name a task owns it; another agent gets no row.
INSERT INTO gateway_tasks (task_id, agent_id, context_id, status, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (task_id) DO UPDATE SET
    context_id = COALESCE(excluded.context_id, context_id),
    status = COALESCE(excluded.status, status),
    updated_at = excluded.updated_at
WHERE gateway_tasks.agent_id = excluded.agent_id
RETURNING agent_id, context_id, status;

-- name: task_owner
SELECT agent_id, context_id, status FROM gateway_tasks WHERE task_id = ?1;

-- name: attach_outbox
-- The outbox file beside the state, read-only (?1: its file: URI with mode=ro).
ATTACH DATABASE ?1 AS outbox;

-- name: purge_tasks
-- Finished tasks (?2: the terminal states) last updated before ?1, at most ?3; for a
-- state with no outbox beside it.
DELETE FROM gateway_tasks WHERE task_id IN (
    SELECT g.task_id FROM gateway_tasks g
    WHERE g.updated_at < ?1
      AND json_extract(g.status, '$.state') IN (SELECT value FROM json_each(?2))
    LIMIT ?3);

-- name: purge_tasks_without_configs
-- The same, keeping tasks that still have a push config in the attached outbox.
DELETE FROM gateway_tasks WHERE task_id IN (
    SELECT g.task_id FROM gateway_tasks g
    WHERE g.updated_at < ?1
      AND json_extract(g.status, '$.state') IN (SELECT value FROM json_each(?2))
      AND NOT EXISTS (SELECT 1 FROM outbox.configs c WHERE c.task_id = g.task_id)
    LIMIT ?3);

-- ---- signing keys -------------------------------------------------------------------

-- name: signing_keys
SELECT kid, alg, private, created_at, retired_at FROM gateway_signing_keys
ORDER BY created_at;

-- name: retire_active_key
UPDATE gateway_signing_keys SET retired_at = ?1 WHERE retired_at IS NULL;

-- name: insert_key
INSERT INTO gateway_signing_keys (kid, alg, private, created_at) VALUES (?1, ?2, ?3, ?4);

-- name: insert_first_key
-- The first key, only while there is no active key: run under the write lock, so of
-- replicas starting together on a fresh database one inserts and the others adopt it.
INSERT INTO gateway_signing_keys (kid, alg, private, created_at)
SELECT ?1, ?2, ?3, ?4
WHERE NOT EXISTS (SELECT 1 FROM gateway_signing_keys WHERE retired_at IS NULL);

-- name: delete_keys
-- ?1: a JSON array of kids.
DELETE FROM gateway_signing_keys WHERE kid IN (SELECT value FROM json_each(?1));

-- name: meta_value
SELECT value, updated_at FROM gateway_meta WHERE name = ?1;

-- name: put_meta
INSERT INTO gateway_meta (name, value, updated_at) VALUES (?1, ?2, ?3)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at;
