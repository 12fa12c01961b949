-- Named queries of the gateway's state on PostgreSQL (a2a_push/gateway/state.py), in the
-- outbox's database and search_path. Where a name is in the SQLite file too, its
-- parameters are the same.

-- ---- tasks --------------------------------------------------------------------------

-- name: claim_task
-- One statement: the owner check, the upsert and the record read are atomic. The
-- first agent to name a task owns it; another agent gets no row.
INSERT INTO gateway_tasks (task_id, agent_id, context_id, status, updated_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (task_id) DO UPDATE SET
    context_id = COALESCE(EXCLUDED.context_id, gateway_tasks.context_id),
    status = COALESCE(EXCLUDED.status, gateway_tasks.status),
    updated_at = EXCLUDED.updated_at
WHERE gateway_tasks.agent_id = EXCLUDED.agent_id
RETURNING agent_id, context_id, status;

-- name: task_owner
SELECT agent_id, context_id, status FROM gateway_tasks WHERE task_id = $1;

-- name: purge_tasks_without_configs
-- Finished tasks ($2: the terminal states) last updated before $1, at most $3, that no
-- push config of the outbox (same database and search_path) names. Rows a replica is
-- updating are skipped (and re-checked when locked), not waited for.
DELETE FROM gateway_tasks WHERE task_id IN (
    SELECT g.task_id FROM gateway_tasks g
    WHERE g.updated_at < $1
      AND (g.status::jsonb ->> 'state') = ANY($2::text[])
      AND NOT EXISTS (SELECT 1 FROM configs c WHERE c.task_id = g.task_id)
    LIMIT $3 FOR UPDATE SKIP LOCKED);

-- ---- signing keys -------------------------------------------------------------------

-- name: has_state
SELECT to_regclass('gateway_signing_keys') IS NOT NULL;

-- name: lock_keys
-- Serialises key changes across replicas (transaction-scoped; $1: the lock's key).
SELECT pg_advisory_xact_lock($1);

-- name: signing_keys
SELECT kid, alg, private, created_at, retired_at FROM gateway_signing_keys
ORDER BY created_at;

-- name: retire_active_key
UPDATE gateway_signing_keys SET retired_at = $1 WHERE retired_at IS NULL;

-- name: insert_key
INSERT INTO gateway_signing_keys (kid, alg, private, created_at) VALUES ($1, $2, $3, $4);

-- name: insert_first_key
-- The first key, only while there is no active key: run under lock_keys, so of replicas
-- starting together on a fresh database one inserts and the others adopt it.
INSERT INTO gateway_signing_keys (kid, alg, private, created_at)
SELECT $1, $2, $3, $4
WHERE NOT EXISTS (SELECT 1 FROM gateway_signing_keys WHERE retired_at IS NULL);

-- name: delete_keys
DELETE FROM gateway_signing_keys WHERE kid = ANY($1::text[]);

-- name: meta_value
SELECT value, updated_at FROM gateway_meta WHERE name = $1 FOR UPDATE;

-- name: put_meta
INSERT INTO gateway_meta (name, value, updated_at) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at;
