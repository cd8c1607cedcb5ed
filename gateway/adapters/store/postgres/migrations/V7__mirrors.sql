-- Tasks whose results wait to be copied into the gateway's storage, queued in the transaction that ends
-- the task. A due one is set aside (its due time moved on) while a replica copies it, so one replica works
-- on it at a time and one that died leaves it due again.
CREATE TABLE pending_mirrors (
    task_id  text PRIMARY KEY,
    due_ms   bigint NOT NULL
);
CREATE INDEX pending_mirrors_due ON pending_mirrors (due_ms);
