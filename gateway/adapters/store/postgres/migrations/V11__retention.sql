-- Retention: the usage lines of the tasks it purges (the usage log reads them as it reads the tasks), and
-- the idempotency records by task, which go with their task's age.
CREATE TABLE usage_lines (
    task_id  text PRIMARY KEY,
    account  text NOT NULL,
    at_ms    bigint NOT NULL,
    line     bytea NOT NULL
);
CREATE INDEX usage_lines_by_time ON usage_lines (at_ms);
CREATE INDEX idempotency_by_task ON idempotency (task_id);
