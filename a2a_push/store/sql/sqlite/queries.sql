-- Named queries of the SQLite backend. The lane algorithm (store/sqlstore.py) runs the
-- same names on both SQL backends with the same positional parameters: ?N here is $N in
-- the PostgreSQL file. A list parameter (PostgreSQL's text[]) is a JSON array here,
-- read with json_each.

-- ---- configs ------------------------------------------------------------------------

-- name: insert_config
INSERT INTO configs (key, id, task_id, owner, tenant, url, endpoint, auth_scheme, secrets,
                     protocol_version, enabled, disabled_reason, failing_since, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14);

-- name: replace_config
UPDATE configs SET tenant = ?2, url = ?3, endpoint = ?4, auth_scheme = ?5, secrets = ?6,
       protocol_version = ?7, enabled = ?8, disabled_reason = ?9, failing_since = NULL
WHERE key = ?1;

-- name: set_lanes_endpoint
UPDATE lanes SET endpoint = ?1 WHERE config_key = ?2;

-- name: find_config_key
SELECT key, created_at, protocol_version, url FROM configs
WHERE task_id = ?1 AND owner = ?2 AND id = ?3;

-- name: retry_config_afresh
-- A config registered again at another URL: what waits for it is due now, its retry
-- steps reset (the backoff was the old URL's), except what is in flight.
UPDATE deliveries SET next_attempt_at = min(next_attempt_at, ?2), rounds = 0
WHERE config_key = ?1 AND state = 'pending'
  AND id NOT IN (SELECT head_id FROM lanes WHERE config_key = ?1 AND lease_owner IS NOT NULL);

-- name: config_lanes_due_now
UPDATE lanes SET due_at = min(due_at, ?2) WHERE config_key = ?1 AND lease_owner IS NULL;

-- name: count_task_configs
SELECT count(*) FROM configs WHERE task_id = ?1;

-- name: config_task
SELECT task_id FROM configs WHERE key = ?1;

-- name: config_by_ids
SELECT * FROM configs WHERE task_id = ?1 AND owner = ?2 AND id = ?3;

-- name: config_by_key
SELECT * FROM configs WHERE key = ?1;

-- name: configs_page
SELECT * FROM configs WHERE task_id = ?1 AND owner = ?2 AND id > ?3 ORDER BY id LIMIT ?4;

-- name: all_configs_page
-- Every task's configs by key, for operators; ?1: only enabled (true) or disabled
-- (false) ones, or all (NULL).
SELECT * FROM configs WHERE (?1 IS NULL OR enabled = ?1) AND key > ?2
ORDER BY key LIMIT ?3;

-- name: count_configs
SELECT count(*) FROM configs WHERE (?1 IS NULL OR enabled = ?1);

-- name: config_url
SELECT url FROM configs WHERE key = ?1;

-- name: enqueue_targets
-- The disabled configs too: a task whose configs are all disabled still records its end
-- (record_task_final).
SELECT key, protocol_version, endpoint, enabled FROM configs WHERE task_id = ?1;

-- name: enabled_task_configs
SELECT * FROM configs WHERE task_id = ?1 AND enabled = 1;

-- name: delete_config
DELETE FROM configs WHERE key = ?1;

-- name: set_config_enabled
-- Enabling starts the failure clock afresh (failing_since = NULL): an old clock would
-- disable the config again at its first failed attempt.
UPDATE configs SET enabled = ?1, disabled_reason = ?2,
                   failing_since = CASE WHEN ?1 THEN NULL ELSE failing_since END
WHERE key = ?3;

-- name: set_config_failing_since
UPDATE configs SET failing_since = ?1 WHERE key = ?2 AND failing_since IS NULL;

-- name: clear_config_failing
UPDATE configs SET failing_since = NULL WHERE key = ?1 AND failing_since IS NOT NULL;

-- name: clear_config_failing_if_idle
-- After a dead letter: the config's failure clock stops when nothing of it is pending.
UPDATE configs SET failing_since = NULL
WHERE key = ?1 AND failing_since IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM lanes WHERE config_key = ?1);

-- name: all_config_secrets
SELECT key, secrets FROM configs WHERE secrets IS NOT NULL;

-- name: set_config_secrets
UPDATE configs SET secrets = ?1 WHERE key = ?2;

-- name: dead_letter_config_deliveries
-- The config's pending work, through the index that leads with config_key; but not the
-- deliveries in flight (their lanes' leased heads): their workers' outcomes say what
-- became of them (a webhook answered 200 is delivered, not dead), and if a worker is
-- gone, the claim after its lease finds the config disabled or deleted and dead-letters
-- the delivery then.
UPDATE deliveries INDEXED BY deliveries_pending_by_lane
SET state = 'dead', last_error = ?1, updated_at = ?2
WHERE config_key = ?3 AND state = 'pending'
  AND id NOT IN (SELECT head_id FROM lanes WHERE config_key = ?3 AND lease_owner IS NOT NULL);

-- name: delete_config_lanes
-- All but the leased lanes (see dead_letter_config_deliveries).
DELETE FROM lanes WHERE config_key = ?1 AND lease_owner IS NULL;

-- ---- outbox -------------------------------------------------------------------------

-- name: next_task_seq
-- ?2: now for a final event, else NULL: the first final event's time is kept, and an
-- event that is not final (the task id reused) forgets it.
INSERT INTO task_seq (task_id, seq, final_at) VALUES (?1, 1, ?2)
ON CONFLICT (task_id) DO UPDATE SET seq = seq + 1,
    final_at = CASE WHEN excluded.final_at IS NULL THEN NULL
                    ELSE coalesce(final_at, excluded.final_at) END
RETURNING seq;

-- name: record_task_final
-- An event for a task whose configs are all disabled: no seq used (0 if the task has
-- none yet), but its end is kept or forgotten as next_task_seq does, so that the purge
-- still finds its configs. A row already right is left as it is.
INSERT INTO task_seq (task_id, seq, final_at) VALUES (?1, 0, ?2)
ON CONFLICT (task_id) DO UPDATE SET final_at = excluded.final_at
WHERE (task_seq.final_at IS NULL) != (excluded.final_at IS NULL);

-- name: final_tasks_to_purge
-- Candidates: tasks finished before ?1 with nothing left to send or replay (no pending
-- or dead delivery: dead letters keep their config until they are purged themselves).
SELECT s.task_id FROM task_seq s INDEXED BY task_seq_final
WHERE s.final_at < ?1
  AND NOT EXISTS (
      SELECT 1 FROM deliveries d WHERE d.task_id = s.task_id AND d.state != 'delivered'
  )
LIMIT ?2;

-- name: forget_tasks_final
-- The candidates still finished before ?2 with nothing left to send or replay. The
-- counter stays (seq never goes back), no longer a candidate.
UPDATE task_seq SET final_at = NULL
WHERE task_id IN (SELECT value FROM json_each(?1)) AND final_at < ?2
  AND NOT EXISTS (
      SELECT 1 FROM deliveries d WHERE d.task_id = task_seq.task_id AND d.state != 'delivered'
  )
RETURNING task_id;

-- name: delete_tasks_configs
DELETE FROM configs WHERE task_id IN (SELECT value FROM json_each(?1));

-- name: insert_delivery
INSERT INTO deliveries (id, config_key, task_id, seq, kind, body, state, attempts,
                        next_attempt_at, created_at, updated_at, endpoint, traceparent)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', 0, ?7, ?7, ?7, ?8, ?9);

-- name: open_lane
INSERT INTO lanes (config_key, task_id, head_id, due_at, endpoint) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (config_key, task_id) DO NOTHING;

-- name: due_lanes
-- ?1 now, ?2 excluded endpoints, ?3 lanes per endpoint, ?4 limit.
-- At most ?3 lanes per endpoint, none for the excluded (saturated or broken)
-- endpoints, earliest due first.
WITH due AS (
    SELECT config_key, task_id, head_id, due_at,
           row_number() OVER (PARTITION BY endpoint ORDER BY due_at) AS nth
    FROM lanes
    WHERE due_at <= ?1
      AND endpoint NOT IN (SELECT value FROM json_each(?2))
)
SELECT l.config_key AS lane_config_key, l.task_id AS lane_task_id,
       {{_claimed_columns}}
FROM due l
JOIN deliveries d ON d.id = l.head_id
LEFT JOIN configs c ON c.key = l.config_key
WHERE l.nth <= ?3
ORDER BY l.due_at
LIMIT ?4;

-- name: lease_lane
UPDATE lanes SET due_at = ?1, lease_owner = ?2 WHERE config_key = ?3 AND task_id = ?4;

-- name: deliveries_with_configs
SELECT {{_claimed_columns}}
FROM deliveries d LEFT JOIN configs c ON c.key = d.config_key
WHERE d.id IN (SELECT value FROM json_each(?1));

-- name: next_head
-- The lane's lowest-seq pending delivery with its config (the first of the two
-- statements of _SQLiteTx.lease_next_head).
SELECT {{_claimed_columns}}
FROM deliveries d LEFT JOIN configs c ON c.key = d.config_key
WHERE d.config_key = ?1 AND d.task_id = ?2 AND d.state = 'pending'
ORDER BY d.seq LIMIT 1;

-- name: lease_head
-- The lane pointed at ?3 and leased to the worker ?5 until ?4 (the second statement of
-- _SQLiteTx.lease_next_head); no row changed when the lane has no row.
UPDATE lanes SET head_id = ?3, due_at = ?4, lease_owner = ?5
WHERE config_key = ?1 AND task_id = ?2;

-- name: finish_delivery
-- The outcome of the worker ?9 for the lane's head: written unless another worker holds
-- the lane's lease now (it took the lane over after this worker's lease ran out: its
-- outcome is the one that counts). ?9 NULL: no worker to check.
UPDATE deliveries SET state = ?1, attempts = ?2, last_status = ?3, last_error = ?4,
       updated_at = ?5
WHERE id = ?6 AND state = 'pending'
  AND NOT EXISTS (
      SELECT 1 FROM lanes WHERE config_key = ?7 AND task_id = ?8 AND lease_owner <> ?9
  );

-- name: retry_delivery
-- (See finish_delivery.)
UPDATE deliveries SET attempts = ?1, rounds = rounds + 1, last_status = ?2, last_error = ?3,
       next_attempt_at = ?4, updated_at = ?5
WHERE id = ?6 AND state = 'pending'
  AND NOT EXISTS (
      SELECT 1 FROM lanes WHERE config_key = ?7 AND task_id = ?8 AND lease_owner <> ?9
  );

-- name: defer_delivery
-- (See finish_delivery.)
UPDATE deliveries SET next_attempt_at = ?1, updated_at = ?2
WHERE id = ?3 AND state = 'pending'
  AND NOT EXISTS (
      SELECT 1 FROM lanes WHERE config_key = ?4 AND task_id = ?5 AND lease_owner <> ?6
  );

-- name: dead_letter_corrupt_state
-- A delivery whose state is none of ours (written by another tool): dead, with the reason.
UPDATE deliveries SET state = 'dead', last_error = ?1, updated_at = ?2
WHERE id = ?3 AND state NOT IN ('pending', 'delivered', 'dead');

-- name: lane_head
SELECT id, next_attempt_at FROM deliveries
WHERE config_key = ?1 AND task_id = ?2 AND state = 'pending'
ORDER BY seq LIMIT 1;

-- name: set_lane_head
INSERT INTO lanes (config_key, task_id, head_id, due_at, lease_owner, endpoint)
VALUES (?1, ?2, ?3, ?4, NULL, coalesce((SELECT endpoint FROM configs WHERE key = ?1), ''))
ON CONFLICT (config_key, task_id)
DO UPDATE SET head_id = excluded.head_id, due_at = excluded.due_at, lease_owner = NULL;

-- name: lane_lease_owner
SELECT lease_owner FROM lanes WHERE config_key = ?1 AND task_id = ?2;

-- name: set_lane_head_only
UPDATE lanes SET head_id = ?1 WHERE config_key = ?2 AND task_id = ?3;

-- name: delete_lane
DELETE FROM lanes WHERE config_key = ?1 AND task_id = ?2;

-- name: release_lanes
-- The lanes of the deliveries, whatever their heads are now (a replay may have put an
-- older delivery first while one was in flight); only the worker's own leases.
UPDATE lanes SET due_at = (SELECT next_attempt_at FROM deliveries WHERE id = lanes.head_id),
       lease_owner = NULL
WHERE lease_owner = ?2
  AND (config_key, task_id) IN (
      SELECT config_key, task_id FROM deliveries
      WHERE id IN (SELECT value FROM json_each(?1))
  );

-- name: delivery_by_id
SELECT d.*, (SELECT l.due_at FROM lanes l WHERE l.config_key = d.config_key AND l.task_id = d.task_id AND l.head_id = d.id AND l.lease_owner IS NOT NULL) AS leased_until
FROM deliveries d WHERE id = ?1;

-- name: dead_delivery_tasks
SELECT DISTINCT task_id FROM deliveries
WHERE id IN (SELECT value FROM json_each(?1)) AND state = 'dead';

-- name: replay_deliveries
UPDATE deliveries SET state = 'pending', attempts = 0, rounds = 0, next_attempt_at = ?1,
       updated_at = ?1, last_error = NULL, last_status = NULL
WHERE id IN (SELECT value FROM json_each(?2)) AND state = 'dead'
  AND task_id IN (SELECT value FROM json_each(?3))
  AND EXISTS (SELECT 1 FROM configs c WHERE c.key = deliveries.config_key AND c.enabled = 1)
RETURNING config_key, task_id;

-- name: purge_deliveries
-- "state != 'pending'" lets the partial index deliveries_finished_by_age serve it.
DELETE FROM deliveries WHERE id IN (
    SELECT id FROM deliveries
    WHERE state = ?1 AND state != 'pending' AND updated_at < ?2
    LIMIT ?3
);

-- ---- the attempt history -----------------------------------------------------------

-- name: insert_attempt
-- One attempt, in the transaction of its outcome; none for a delivery purged since, and
-- none twice (a batch written again op by op).
INSERT INTO attempts (delivery_id, number, started_at, duration, endpoint, verdict, status,
                      error_class, error, retry_at, response)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11
WHERE EXISTS (SELECT 1 FROM deliveries WHERE id = ?1)
ON CONFLICT DO NOTHING;

-- name: delivery_attempts
SELECT * FROM attempts WHERE delivery_id = ?1 ORDER BY started_at, number;

-- name: next_due_at
SELECT min(due_at) FROM lanes WHERE endpoint NOT IN (SELECT value FROM json_each(?1));

-- name: stats
-- ?2: whether to count the delivered rows (every retained one: the metrics scrape and
-- the health check leave it out, and the subquery then never runs).
SELECT
    (SELECT count(*) FROM deliveries WHERE state = 'pending') AS pending,
    (SELECT count(*) FROM lanes WHERE due_at <= ?1) AS due,
    (SELECT count(*) FROM lanes WHERE lease_owner IS NOT NULL AND due_at > ?1) AS leased,
    (SELECT count(*) FROM deliveries WHERE state = 'dead') AS dead,
    CASE WHEN ?2 THEN (SELECT count(*) FROM deliveries WHERE state = 'delivered') END
        AS delivered,
    (SELECT min(created_at) FROM deliveries WHERE state = 'pending') AS oldest;

-- name: get_idempotency_key
-- Unless it has expired (first seen before ?2), whether or not the purge has run.
SELECT seq, ids FROM idempotency_keys WHERE key = ?1 AND created_at >= ?2;

-- name: put_idempotency_key
-- (Replacing an expired key's row.)
INSERT INTO idempotency_keys (key, seq, ids, created_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (key) DO UPDATE SET seq = excluded.seq, ids = excluded.ids,
    created_at = excluded.created_at;

-- name: purge_idempotency_keys
-- At most ?2 of them (the oldest first), so a purge never holds the writer for long.
DELETE FROM idempotency_keys WHERE key IN (
    SELECT key FROM idempotency_keys WHERE created_at < ?1 ORDER BY created_at LIMIT ?2
);

-- name: attempt_buckets
-- Attempts from ?1 to ?3 per interval of ?2 seconds (numbered from 0), delivered or not.
SELECT CAST((started_at - ?1) / ?2 AS INTEGER) AS bucket,
       sum(verdict = 'delivered') AS delivered, sum(verdict <> 'delivered') AS failed
FROM attempts WHERE started_at >= ?1 AND started_at < ?3
GROUP BY bucket;

-- name: recent_attempts
SELECT endpoint, duration, verdict FROM attempts
WHERE started_at >= ?1 AND started_at < ?2
ORDER BY started_at DESC LIMIT ?3;

-- ---- rate limits ----------------------------------------------------------------------

-- name: take_tokens
-- Up to ?4 tokens from endpoint ?1's bucket (refilled at ?2 a second, holding at most
-- ?3), at time ?5. granted: how many were taken; tokens: what is left (below 1 when none
-- were). (CAST truncates, which is floor for these non-negative amounts.)
INSERT INTO rate_buckets AS b (endpoint, tokens, updated_at, granted)
SELECT ?1, ?3 - min(?4, CAST(?3 AS INTEGER)), ?5, min(?4, CAST(?3 AS INTEGER)) WHERE true
ON CONFLICT (endpoint) DO UPDATE SET
    granted = min(?4, CAST(min(?3, b.tokens + max(0, excluded.updated_at - b.updated_at) * ?2)
                           AS INTEGER)),
    tokens = min(?3, b.tokens + max(0, excluded.updated_at - b.updated_at) * ?2)
        - min(?4, CAST(min(?3, b.tokens + max(0, excluded.updated_at - b.updated_at) * ?2)
                       AS INTEGER)),
    updated_at = max(b.updated_at, excluded.updated_at)
RETURNING granted, tokens;
