-- Named queries of the PostgreSQL backend ($n parameters, asyncpg). The lane algorithm
-- (store/sqlstore.py) runs the same names on both SQL backends with the same positional
-- parameters: $N here is ?N in the SQLite file.

-- ---- migrations ---------------------------------------------------------------------

-- name: lock_migrations
-- A session lock, so two processes starting at once migrate one after the other.
SELECT pg_advisory_lock($1::integer, hashtext($2));

-- name: unlock_migrations
SELECT pg_advisory_unlock($1::integer, hashtext($2));

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- name: applied_migrations
SELECT version FROM schema_migrations ORDER BY version;

-- name: record_migration
INSERT INTO schema_migrations (version) VALUES ($1);

-- ---- locks --------------------------------------------------------------------------

-- name: lock_tasks
-- Serialises the transactions that read and rewrite a task's configs, lanes and
-- sequence number, across processes. Taken in hash order so two transactions locking
-- several tasks cannot deadlock (volatile output expressions run after the sort).
-- Returns the transaction's time: $3, or else the database server's clock once every
-- lock is held (one clock for every replica, and no lease shortened by the wait).
SELECT coalesce($3::float8, extract(epoch FROM clock_timestamp())::float8) AS now
FROM (
    SELECT count(*) FROM (
        SELECT pg_advisory_xact_lock($1::integer, h)
        FROM (SELECT DISTINCT hashtext(t) AS h FROM unnest($2::text[]) AS t) AS locks
        ORDER BY h
    ) AS held
) AS done;

-- name: record_attempts
-- Not a statement: a WITH clause that PostgresStore puts before lock_tasks, so that the
-- attempts the transaction's outcomes end are written in the statement that takes the
-- locks (no round trip of their own). $4-$14 are their columns, as arrays. None for a
-- delivery purged since, and none twice (a batch written again one by one).
WITH recorded AS (
    INSERT INTO attempts (delivery_id, number, started_at, duration, endpoint, verdict,
                          status, error_class, error, retry_at, response)
    SELECT a.* FROM unnest($4::text[], $5::int[], $6::float8[], $7::float8[], $8::text[],
                           $9::text[], $10::int[], $11::text[], $12::text[], $13::float8[],
                           $14::bytea[])
        AS a (delivery_id, number, started_at, duration, endpoint, verdict, status,
              error_class, error, retry_at, response)
    WHERE EXISTS (SELECT 1 FROM deliveries d WHERE d.id = a.delivery_id)
    ON CONFLICT DO NOTHING
)

-- name: try_lock_task
SELECT pg_try_advisory_xact_lock($1::integer, hashtext($2));

-- name: begin
BEGIN;

-- name: begin_without_flush
-- Two statements, sent as one (no parameters): see PostgresStore._transaction.
BEGIN; SET LOCAL synchronous_commit TO off;

-- name: commit
COMMIT;

-- name: ping
SELECT 1;

-- ---- configs ------------------------------------------------------------------------

-- name: insert_config
INSERT INTO configs (key, id, task_id, owner, tenant, url, endpoint, auth_scheme, secrets,
                     protocol_version, enabled, disabled_reason, failing_since, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14);

-- name: replace_config
UPDATE configs SET tenant = $2, url = $3, endpoint = $4, auth_scheme = $5, secrets = $6,
       protocol_version = $7, enabled = $8, disabled_reason = $9, failing_since = NULL
WHERE key = $1;

-- name: set_lanes_endpoint
UPDATE lanes SET endpoint = $1 WHERE config_key = $2;

-- name: find_config_key
SELECT key, created_at, protocol_version, url FROM configs
WHERE task_id = $1 AND owner = $2 AND id = $3;

-- name: retry_config_afresh
-- A config registered again at another URL: what waits for it is due now, its retry
-- steps reset (the backoff was the old URL's), except what is in flight.
UPDATE deliveries SET next_attempt_at = least(next_attempt_at, $2), rounds = 0
WHERE config_key = $1 AND state = 'pending'
  AND id NOT IN (SELECT head_id FROM lanes WHERE config_key = $1 AND lease_owner IS NOT NULL);

-- name: config_lanes_due_now
UPDATE lanes SET due_at = least(due_at, $2) WHERE config_key = $1 AND lease_owner IS NULL;

-- name: count_task_configs
SELECT count(*) FROM configs WHERE task_id = $1;

-- name: config_task
SELECT task_id FROM configs WHERE key = $1;

-- name: config_by_ids
SELECT * FROM configs WHERE task_id = $1 AND owner = $2 AND id = $3;

-- name: config_by_key
SELECT * FROM configs WHERE key = $1;

-- name: configs_page
SELECT * FROM configs WHERE task_id = $1 AND owner = $2 AND id > $3 ORDER BY id LIMIT $4;

-- name: all_configs_page
-- Every task's configs by key, for operators; $1: only enabled (true) or disabled
-- (false) ones, or all (NULL).
SELECT * FROM configs WHERE ($1::boolean IS NULL OR enabled = $1::boolean) AND key > $2
ORDER BY key LIMIT $3;

-- name: count_configs
SELECT count(*) FROM configs WHERE ($1::boolean IS NULL OR enabled = $1::boolean);

-- name: config_url
SELECT url FROM configs WHERE key = $1;

-- name: enqueue_targets
-- The disabled configs too: a task whose configs are all disabled still records its end
-- (record_task_final).
SELECT key, protocol_version, endpoint, enabled FROM configs WHERE task_id = $1;

-- name: enabled_task_configs
SELECT * FROM configs WHERE task_id = $1 AND enabled;

-- name: delete_config
DELETE FROM configs WHERE key = $1;

-- name: set_config_enabled
-- Enabling starts the failure clock afresh (failing_since = NULL): an old clock would
-- disable the config again at its first failed attempt.
UPDATE configs SET enabled = $1, disabled_reason = $2,
                   failing_since = CASE WHEN $1 THEN NULL ELSE failing_since END
WHERE key = $3;

-- name: set_config_failing_since
UPDATE configs SET failing_since = $1 WHERE key = $2 AND failing_since IS NULL;

-- name: clear_config_failing
UPDATE configs SET failing_since = NULL WHERE key = $1 AND failing_since IS NOT NULL;

-- name: clear_config_failing_if_idle
-- After a dead letter: the config's failure clock stops when nothing of it is pending.
UPDATE configs SET failing_since = NULL
WHERE key = $1 AND failing_since IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM lanes WHERE config_key = $1);

-- name: all_config_secrets
SELECT key, secrets FROM configs WHERE secrets IS NOT NULL FOR UPDATE;

-- name: set_config_secrets
UPDATE configs SET secrets = $1 WHERE key = $2;

-- name: dead_letter_config_deliveries
-- Not the deliveries in flight (their lanes' leased heads): their workers' outcomes say
-- what became of them (a webhook answered 200 is delivered, not dead), and if a worker
-- is gone, the claim after its lease finds the config disabled or deleted and
-- dead-letters the delivery then.
UPDATE deliveries SET state = 'dead', last_error = $1, updated_at = $2
WHERE config_key = $3 AND state = 'pending'
  AND id NOT IN (SELECT head_id FROM lanes WHERE config_key = $3 AND lease_owner IS NOT NULL);

-- name: delete_config_lanes
-- All but the leased lanes (see dead_letter_config_deliveries).
DELETE FROM lanes WHERE config_key = $1 AND lease_owner IS NULL;

-- ---- outbox -------------------------------------------------------------------------

-- name: next_task_seq
-- $2: now for a final event, else NULL: the first final event's time is kept, and an
-- event that is not final (the task id reused) forgets it.
INSERT INTO task_seq AS s (task_id, seq, final_at) VALUES ($1, 1, $2)
ON CONFLICT (task_id) DO UPDATE SET seq = s.seq + 1,
    final_at = CASE WHEN excluded.final_at IS NULL THEN NULL
                    ELSE coalesce(s.final_at, excluded.final_at) END
RETURNING seq;

-- name: record_task_final
-- An event for a task whose configs are all disabled: no seq used (0 if the task has
-- none yet), but its end is kept or forgotten as next_task_seq does, so that the purge
-- still finds its configs. A row already right is left as it is.
INSERT INTO task_seq AS s (task_id, seq, final_at) VALUES ($1, 0, $2)
ON CONFLICT (task_id) DO UPDATE SET final_at = excluded.final_at
WHERE (s.final_at IS NULL) <> (excluded.final_at IS NULL);

-- name: final_tasks_to_purge
-- Candidates (no lock taken: the purge then takes the tasks' locks, as publishes do,
-- and checks again in forget_tasks_final).
SELECT s.task_id FROM task_seq s
WHERE s.final_at IS NOT NULL AND s.final_at < $1
  AND NOT EXISTS (
      SELECT 1 FROM deliveries d WHERE d.task_id = s.task_id AND d.state <> 'delivered'
  )
LIMIT $2;

-- name: forget_tasks_final
-- Under the tasks' locks: those still finished before $2 with nothing left to send or
-- replay (no pending or dead delivery: dead letters keep their config until they are
-- purged). The counter stays (seq never goes back), no longer a candidate.
UPDATE task_seq s SET final_at = NULL
WHERE s.task_id = ANY($1::text[]) AND s.final_at < $2
  AND NOT EXISTS (
      SELECT 1 FROM deliveries d WHERE d.task_id = s.task_id AND d.state <> 'delivered'
  )
RETURNING s.task_id;

-- name: delete_tasks_configs
DELETE FROM configs WHERE task_id = ANY($1::text[]);

-- name: fan_out
-- next_task_seq ($1 task, $2 final time or NULL), then insert_delivery and open_lane for
-- each target, in one statement: $3 kind, $4 now, $5 traceparent; $6-$9 the deliveries'
-- ids, config keys, bodies and endpoints, as arrays. Returns the seq.
WITH s AS (
    INSERT INTO task_seq AS s (task_id, seq, final_at) VALUES ($1, 1, $2)
    ON CONFLICT (task_id) DO UPDATE SET seq = s.seq + 1,
        final_at = CASE WHEN excluded.final_at IS NULL THEN NULL
                        ELSE coalesce(s.final_at, excluded.final_at) END
    RETURNING seq
), d AS (
    INSERT INTO deliveries (id, config_key, task_id, seq, kind, body, state, attempts,
                            next_attempt_at, created_at, updated_at, endpoint, traceparent)
    SELECT i.id, i.config_key, $1, s.seq, $3, i.body, 'pending', 0, $4, $4, $4,
           i.endpoint, $5
    FROM unnest($6::text[], $7::text[], $8::bytea[], $9::text[])
        AS i (id, config_key, body, endpoint), s
), l AS (
    INSERT INTO lanes (config_key, task_id, head_id, due_at, endpoint)
    SELECT i.config_key, $1, i.id, $4, i.endpoint
    FROM unnest($6::text[], $7::text[], $9::text[]) AS i (id, config_key, endpoint)
    ON CONFLICT (config_key, task_id) DO NOTHING
)
SELECT seq FROM s;

-- name: insert_delivery
INSERT INTO deliveries (id, config_key, task_id, seq, kind, body, state, attempts,
                        next_attempt_at, created_at, updated_at, endpoint, traceparent)
VALUES ($1, $2, $3, $4, $5, $6, 'pending', 0, $7, $7, $7, $8, $9);

-- name: open_lane
INSERT INTO lanes (config_key, task_id, head_id, due_at, endpoint) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (config_key, task_id) DO NOTHING;

-- name: claim_lanes
-- $1 now (NULL: the database server's clock, returned as now for the leases), $2
-- excluded endpoints, $3 lanes per endpoint, $4 limit.
-- Earliest due first, at most $3 lanes per endpoint, none for the excluded (saturated
-- or broken) endpoints. Candidates are locked first (SKIP LOCKED: lanes another worker
-- is claiming right now are passed over, not waited for), and only then ranked per
-- endpoint: ranking first would give every worker the same few lanes to fight over, so
-- a second worker would mostly come back empty. A lane another worker has just leased
-- fails the re-check of due_at on its new row version, so no lane is leased twice.
-- Candidates locked but not taken are unlocked when the claim commits. window_size: how
-- many were locked; a full window may have hidden other endpoints' lanes behind a few
-- backlogged ones (the store then claims again, those endpoints excluded).
WITH clock AS (
    SELECT coalesce($1::float8, extract(epoch FROM statement_timestamp())::float8) AS now
), locked AS (
    SELECT config_key, task_id, due_at, endpoint, head_id
    FROM lanes
    WHERE due_at <= (SELECT now FROM clock) AND endpoint <> ALL ($2::text[])
    ORDER BY due_at
    LIMIT $4 * 4
    FOR UPDATE SKIP LOCKED
), ranked AS (
    SELECT config_key, task_id, due_at, head_id, endpoint,
           row_number() OVER (PARTITION BY endpoint ORDER BY due_at) AS nth,
           count(*) OVER () AS window_size
    FROM locked
)
SELECT l.config_key AS lane_config_key, l.task_id AS lane_task_id,
       l.endpoint AS lane_endpoint, l.window_size, (SELECT now FROM clock) AS now,
       {{_claimed_columns}}
FROM ranked l
JOIN deliveries d ON d.id = l.head_id
LEFT JOIN configs c ON c.key = l.config_key
WHERE l.nth <= $3
ORDER BY l.due_at
LIMIT $4;

-- name: lease_lanes
-- $1 lease expiry, $2 worker, $3 and $4 the lanes' config keys and task ids.
UPDATE lanes SET due_at = $1, lease_owner = $2
FROM unnest($3::text[], $4::text[]) AS k (config_key, task_id)
WHERE lanes.config_key = k.config_key AND lanes.task_id = k.task_id;

-- name: deliveries_with_configs
SELECT {{_claimed_columns}}
FROM deliveries d LEFT JOIN configs c ON c.key = d.config_key
WHERE d.id = ANY ($1::text[]);

-- name: lease_next_head
-- The lane's lowest-seq pending delivery, leased to the worker ($5, until $4) if it is
-- due at $3: that delivery with its config, or no row (none pending, not due, or no
-- lane row).
WITH leased AS (
    UPDATE lanes SET head_id = h.id, due_at = $4, lease_owner = $5
    FROM (
        SELECT id, next_attempt_at FROM deliveries
        WHERE config_key = $1 AND task_id = $2 AND state = 'pending'
        ORDER BY seq LIMIT 1
    ) AS h
    WHERE lanes.config_key = $1 AND lanes.task_id = $2 AND h.next_attempt_at <= $3
    RETURNING lanes.head_id
)
SELECT {{_claimed_columns}}
FROM leased JOIN deliveries d ON d.id = leased.head_id
LEFT JOIN configs c ON c.key = d.config_key;

-- name: finish_delivery
-- The outcome of the worker $9 for the lane's head: written unless another worker holds
-- the lane's lease now (it took the lane over after this worker's lease ran out: its
-- outcome is the one that counts). The lane row is locked, so no claim takes the lane
-- over between the check and the write. $9 NULL: no worker to check.
WITH lane AS (
    SELECT lease_owner FROM lanes WHERE config_key = $7 AND task_id = $8 FOR UPDATE
)
UPDATE deliveries SET state = $1, attempts = $2, last_status = $3, last_error = $4,
       updated_at = $5
WHERE id = $6 AND state = 'pending'
  AND NOT EXISTS (SELECT 1 FROM lane WHERE lease_owner <> $9::text);

-- name: finish_and_lease_next
-- finish_delivery ($1-$9) and, when it wrote, lease_next_head over the deliveries after
-- it ($10 lease until, $11 worker; due at $5), in one statement: the lowest-seq pending
-- delivery other than the one just finished (the statement's snapshot still shows that
-- one pending). changed: rows finished (0 or 1); leased: the id leased, or NULL.
WITH lane AS (
    SELECT lease_owner FROM lanes WHERE config_key = $7 AND task_id = $8 FOR UPDATE
), done AS (
    UPDATE deliveries SET state = $1, attempts = $2, last_status = $3, last_error = $4,
           updated_at = $5
    WHERE id = $6 AND state = 'pending'
      AND NOT EXISTS (SELECT 1 FROM lane WHERE lease_owner <> $9::text)
    RETURNING id
), head AS (
    SELECT id, next_attempt_at FROM deliveries
    WHERE config_key = $7 AND task_id = $8 AND state = 'pending' AND id <> $6
      AND EXISTS (SELECT 1 FROM done)
    ORDER BY seq LIMIT 1
), leased AS (
    UPDATE lanes SET head_id = head.id, due_at = $10, lease_owner = $11
    FROM head
    WHERE lanes.config_key = $7 AND lanes.task_id = $8 AND head.next_attempt_at <= $5
    RETURNING lanes.head_id
)
SELECT (SELECT count(*) FROM done)::int AS changed, (SELECT head_id FROM leased) AS leased;

-- name: finish_and_lease_many
-- finish_and_lease_next for several outcomes, each on a lane of its own, in one
-- statement: $1-$10 are the outcomes' columns as arrays (state, attempts, status, error,
-- delivery id, config key, task id, worker whose outcome it is, lease until, worker
-- taking the lease), $11 the transaction's time. An outcome with no lease (until NULL),
-- or whose lane's next delivery is not due yet, points its lane at that delivery, due
-- at its next attempt but not before $11 and leased to no one (as set_lane_head does).
-- One row per outcome, in the order given (ord, from 1): changed (0 or 1), the id
-- leased or NULL, advanced (1 when the lane was moved on or leased here; 0: the lane
-- is still to be moved on, or dropped when nothing of it is pending), and the leased
-- delivery with its config (the columns of deliveries_with_configs, as this statement
-- found them: it changes neither).
WITH item AS (
    SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::text[], $5::text[],
                         $6::text[], $7::text[], $8::text[], $9::float8[], $10::text[])
        WITH ORDINALITY
        AS i (state, attempts, status, error, id, config_key, task_id, worker, until,
              taker, ord)
), lane AS (
    SELECT l.config_key, l.task_id, l.lease_owner
    FROM lanes l JOIN item i ON l.config_key = i.config_key AND l.task_id = i.task_id
    FOR UPDATE OF l
), done AS (
    UPDATE deliveries d SET state = i.state, attempts = i.attempts, last_status = i.status,
           last_error = i.error, updated_at = $11
    FROM item i
    WHERE d.id = i.id AND d.state = 'pending'
      AND NOT EXISTS (
          SELECT 1 FROM lane
          WHERE lane.config_key = i.config_key AND lane.task_id = i.task_id
            AND lane.lease_owner <> i.worker
      )
    RETURNING d.id
), head AS (
    SELECT i.config_key, i.task_id, h.id, h.next_attempt_at,
           (i.until IS NOT NULL AND h.next_attempt_at <= $11) AS take, i.until, i.taker
    FROM item i JOIN done ON done.id = i.id
    CROSS JOIN LATERAL (
        SELECT id, next_attempt_at FROM deliveries
        WHERE config_key = i.config_key AND task_id = i.task_id AND state = 'pending'
          AND id <> i.id
        ORDER BY seq LIMIT 1
    ) AS h
), moved AS (
    UPDATE lanes SET head_id = head.id,
           due_at = CASE WHEN head.take THEN head.until
                         ELSE greatest(head.next_attempt_at, $11) END,
           lease_owner = CASE WHEN head.take THEN head.taker END
    FROM head
    WHERE lanes.config_key = head.config_key AND lanes.task_id = head.task_id
    RETURNING lanes.config_key, lanes.task_id, lanes.head_id, head.take
)
SELECT i.ord::int AS ord, (done.id IS NOT NULL)::int AS changed,
       CASE WHEN moved.take THEN moved.head_id END AS leased,
       (moved.head_id IS NOT NULL)::int AS advanced,
       {{_claimed_columns}}
FROM item i
LEFT JOIN done ON done.id = i.id
LEFT JOIN moved ON moved.config_key = i.config_key AND moved.task_id = i.task_id
LEFT JOIN deliveries d ON d.id = moved.head_id AND moved.take
LEFT JOIN configs c ON c.key = d.config_key
ORDER BY i.ord;

-- name: retry_delivery
-- (See finish_delivery.)
WITH lane AS (
    SELECT lease_owner FROM lanes WHERE config_key = $7 AND task_id = $8 FOR UPDATE
)
UPDATE deliveries SET attempts = $1, rounds = rounds + 1, last_status = $2, last_error = $3,
       next_attempt_at = $4, updated_at = $5
WHERE id = $6 AND state = 'pending'
  AND NOT EXISTS (SELECT 1 FROM lane WHERE lease_owner <> $9::text);

-- name: defer_delivery
-- (See finish_delivery.)
WITH lane AS (
    SELECT lease_owner FROM lanes WHERE config_key = $4 AND task_id = $5 FOR UPDATE
)
UPDATE deliveries SET next_attempt_at = $1, updated_at = $2
WHERE id = $3 AND state = 'pending'
  AND NOT EXISTS (SELECT 1 FROM lane WHERE lease_owner <> $6::text);

-- name: dead_letter_corrupt_state
-- A delivery whose state is none of ours (written by another tool): dead, with the reason.
UPDATE deliveries SET state = 'dead', last_error = $1, updated_at = $2
WHERE id = $3 AND state NOT IN ('pending', 'delivered', 'dead');

-- name: lane_head
SELECT id, next_attempt_at FROM deliveries
WHERE config_key = $1 AND task_id = $2 AND state = 'pending'
ORDER BY seq LIMIT 1;

-- name: set_lane_head
INSERT INTO lanes (config_key, task_id, head_id, due_at, lease_owner, endpoint)
VALUES ($1, $2, $3, $4, NULL, coalesce((SELECT endpoint FROM configs WHERE key = $1), ''))
ON CONFLICT (config_key, task_id)
DO UPDATE SET head_id = excluded.head_id, due_at = excluded.due_at, lease_owner = NULL;

-- name: lane_lease_owner
SELECT lease_owner FROM lanes WHERE config_key = $1 AND task_id = $2;

-- name: set_lane_head_only
UPDATE lanes SET head_id = $1 WHERE config_key = $2 AND task_id = $3;

-- name: delete_lane
DELETE FROM lanes WHERE config_key = $1 AND task_id = $2;

-- name: release_lanes
-- The lanes of the deliveries, whatever their heads are now (a replay may have put an
-- older delivery first while one was in flight). Only the worker's own leases: a lane
-- whose lease expired and went to another worker stays with that worker.
UPDATE lanes SET due_at = h.next_attempt_at, lease_owner = NULL
FROM deliveries d, deliveries h
WHERE d.id = ANY ($1::text[]) AND lanes.config_key = d.config_key
  AND lanes.task_id = d.task_id AND lanes.lease_owner = $2 AND h.id = lanes.head_id;

-- name: delivery_by_id
SELECT d.*, (SELECT l.due_at FROM lanes l WHERE l.config_key = d.config_key AND l.task_id = d.task_id AND l.head_id = d.id AND l.lease_owner IS NOT NULL) AS leased_until
FROM deliveries d WHERE id = $1;

-- name: dead_delivery_tasks
SELECT DISTINCT task_id FROM deliveries WHERE id = ANY ($1::text[]) AND state = 'dead';

-- name: replay_deliveries
UPDATE deliveries SET state = 'pending', attempts = 0, rounds = 0, next_attempt_at = $1,
       updated_at = $1, last_error = NULL, last_status = NULL
WHERE id = ANY ($2::text[]) AND state = 'dead' AND task_id = ANY ($3::text[])
  AND EXISTS (SELECT 1 FROM configs c WHERE c.key = deliveries.config_key AND c.enabled)
RETURNING config_key, task_id;

-- name: purge_deliveries
-- Rows another transaction holds (a concurrent purge elsewhere) are skipped, not waited
-- for. Their attempts go with them.
WITH doomed AS (
    SELECT id FROM deliveries WHERE state = $1 AND updated_at < $2
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), history AS (
    DELETE FROM attempts WHERE delivery_id IN (SELECT id FROM doomed)
)
DELETE FROM deliveries WHERE id IN (SELECT id FROM doomed);

-- name: delivery_attempts
SELECT * FROM attempts WHERE delivery_id = $1 ORDER BY started_at, number;

-- name: next_due_at
-- Seconds from now (the database server's clock) until then; negative when overdue.
SELECT min(due_at) - extract(epoch FROM statement_timestamp())::float8
FROM lanes WHERE NOT (endpoint = ANY($1::text[]));

-- name: stats
-- $1 now (NULL: the database server's clock); $2 whether to count the delivered rows
-- (every retained one: the metrics scrape and the health check leave it out, and the
-- subquery then never runs).
WITH clock AS (
    SELECT coalesce($1::float8, extract(epoch FROM statement_timestamp())::float8) AS now
)
SELECT
    (SELECT count(*) FROM deliveries WHERE state = 'pending') AS pending,
    (SELECT count(*) FROM lanes WHERE due_at <= (SELECT now FROM clock)) AS due,
    (SELECT count(*) FROM lanes
     WHERE lease_owner IS NOT NULL AND due_at > (SELECT now FROM clock)) AS leased,
    (SELECT count(*) FROM deliveries WHERE state = 'dead') AS dead,
    CASE WHEN $2::boolean
         THEN (SELECT count(*) FROM deliveries WHERE state = 'delivered') END AS delivered,
    (SELECT min(created_at) FROM deliveries WHERE state = 'pending') AS oldest;

-- name: get_idempotency_key
-- Unless it has expired (first seen before $2), whether or not the purge has run.
SELECT seq, ids FROM idempotency_keys WHERE key = $1 AND created_at >= $2;

-- name: put_idempotency_key
-- (Replacing an expired key's row.)
INSERT INTO idempotency_keys (key, seq, ids, created_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (key) DO UPDATE SET seq = excluded.seq, ids = excluded.ids,
    created_at = excluded.created_at;

-- name: purge_idempotency_keys
-- At most $2 of them (the oldest first), so a purge never holds locks for long.
DELETE FROM idempotency_keys WHERE key IN (
    SELECT key FROM idempotency_keys WHERE created_at < $1 ORDER BY created_at LIMIT $2
);

-- name: attempt_buckets
-- Attempts from $1 to $3 per interval of $2 seconds (numbered from 0), delivered or not.
SELECT floor((started_at - $1) / $2)::integer AS bucket,
       count(*) FILTER (WHERE verdict = 'delivered') AS delivered,
       count(*) FILTER (WHERE verdict <> 'delivered') AS failed
FROM attempts WHERE started_at >= $1 AND started_at < $3
GROUP BY bucket;

-- name: recent_attempts
SELECT endpoint, duration, verdict FROM attempts
WHERE started_at >= $1 AND started_at < $2
ORDER BY started_at DESC LIMIT $3;

-- ---- rate limits ----------------------------------------------------------------------

-- name: take_tokens
-- Up to $4 tokens from endpoint $1's bucket (refilled at $2 a second, holding at most
-- $3), at time $5 (NULL: the database server's clock); one statement, so concurrent
-- takers queue on the row. granted: how many were taken; tokens: what is left (below 1 when none were).
INSERT INTO rate_buckets AS b (endpoint, tokens, updated_at, granted)
SELECT $1, $3::float8 - LEAST($4::int, floor($3::float8)::int), t.now,
       LEAST($4::int, floor($3::float8)::int)
FROM (SELECT coalesce($5::float8, extract(epoch FROM clock_timestamp())::float8) AS now) t
ON CONFLICT (endpoint) DO UPDATE SET
    granted = LEAST($4::int, floor(LEAST($3::float8,
        b.tokens + GREATEST(0, excluded.updated_at - b.updated_at) * $2::float8))::int),
    tokens = LEAST($3::float8,
        b.tokens + GREATEST(0, excluded.updated_at - b.updated_at) * $2::float8)
        - LEAST($4::int, floor(LEAST($3::float8,
            b.tokens + GREATEST(0, excluded.updated_at - b.updated_at) * $2::float8))::int),
    updated_at = GREATEST(b.updated_at, excluded.updated_at)
RETURNING granted, tokens;
