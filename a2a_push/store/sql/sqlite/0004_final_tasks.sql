-- When a task's final event (a terminal state) was published, so that the retention
-- purge can delete the configs and counter of tasks finished long ago.
ALTER TABLE task_seq ADD COLUMN final_at REAL;
CREATE INDEX IF NOT EXISTS task_seq_final ON task_seq (final_at) WHERE final_at IS NOT NULL;
