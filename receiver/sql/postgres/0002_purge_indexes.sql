-- What the maintenance purge looks up by time: old events, long-deleted subscriptions.
CREATE INDEX receiver_events_by_time ON receiver_events (created_at);
CREATE INDEX receiver_subscriptions_deleted
    ON receiver_subscriptions (deleted_at) WHERE state = 'deleted';
