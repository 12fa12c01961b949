-- What the maintenance purge looks up by time: old events, long-deleted subscriptions.
CREATE INDEX events_by_time ON events (created_at);
CREATE INDEX subscriptions_deleted ON subscriptions (deleted_at) WHERE state = 'deleted';
