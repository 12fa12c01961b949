-- The receiver's schema (PostgreSQL). Tables are prefixed so a receiver can share a
-- database (and schema) with an a2a-push gateway.
CREATE TABLE receiver_subscriptions (
    id           TEXT PRIMARY KEY,
    client_id    TEXT NOT NULL,
    agent_url    TEXT NOT NULL,
    task_id      TEXT NOT NULL,
    token_digest TEXT NOT NULL UNIQUE,
    state        TEXT NOT NULL,
    created_at   DOUBLE PRECISION NOT NULL,
    deleted_at   DOUBLE PRECISION
);
CREATE INDEX receiver_subscriptions_by_task ON receiver_subscriptions (agent_url, task_id);
CREATE INDEX receiver_subscriptions_by_client ON receiver_subscriptions (client_id, created_at);
CREATE UNIQUE INDEX receiver_subscriptions_one_active
    ON receiver_subscriptions (client_id, agent_url, task_id) WHERE state = 'active';

CREATE TABLE receiver_seen (
    agent_url   TEXT NOT NULL,
    dedup_key   TEXT NOT NULL,
    received_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (agent_url, dedup_key)
);
CREATE INDEX receiver_seen_by_time ON receiver_seen (received_at);

CREATE TABLE receiver_notifications (
    id              BIGSERIAL PRIMARY KEY,
    agent_url       TEXT NOT NULL,
    task_id         TEXT NOT NULL,
    subscription_id TEXT NOT NULL,
    dedup_key       TEXT NOT NULL,
    method          TEXT NOT NULL,
    kind            TEXT NOT NULL,
    seq             BIGINT,
    received_at     DOUBLE PRECISION NOT NULL,
    body            BYTEA NOT NULL,
    fetched         BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX receiver_notifications_pending
    ON receiver_notifications (agent_url, task_id, id) WHERE NOT fetched;
CREATE INDEX receiver_notifications_by_time ON receiver_notifications (received_at) WHERE fetched;

CREATE TABLE receiver_tasks (
    agent_url        TEXT NOT NULL,
    task_id          TEXT NOT NULL,
    context_id       TEXT,
    state            TEXT,
    final            BOOLEAN NOT NULL,
    status_timestamp TEXT,
    generation       BIGINT NOT NULL,
    snapshot         TEXT NOT NULL,
    updated_at       DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (agent_url, task_id)
);
CREATE INDEX receiver_tasks_by_context ON receiver_tasks (context_id);

CREATE TABLE receiver_events (
    id         BIGSERIAL PRIMARY KEY,
    agent_url  TEXT NOT NULL,
    task_id    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    data       TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX receiver_events_by_task ON receiver_events (agent_url, task_id, id);
