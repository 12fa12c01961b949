-- Fragments the named queries of every backend include (see queries.sql in each
-- backend's folder): written once here, in SQL that both dialects read alike.

-- name: _claimed_columns
-- A fragment, not a query (its name starts with _): the columns of a claimed
-- delivery (d) and its config (c, as c_*), as RowMapping._claimed_from_row reads
-- them; a query includes it as {{_claimed_columns}}.
d.id, d.config_key, d.task_id, d.seq, d.kind, d.body, d.state, d.attempts, d.rounds,
       d.next_attempt_at, d.created_at, d.updated_at, d.last_status, d.last_error, d.traceparent,
       c.key AS c_key, c.id AS c_id, c.task_id AS c_task_id, c.owner AS c_owner,
       c.tenant AS c_tenant, c.url AS c_url, c.auth_scheme AS c_auth_scheme,
       c.secrets AS c_secrets, c.protocol_version AS c_protocol_version,
       c.enabled AS c_enabled, c.disabled_reason AS c_disabled_reason,
       c.failing_since AS c_failing_since, c.created_at AS c_created_at
