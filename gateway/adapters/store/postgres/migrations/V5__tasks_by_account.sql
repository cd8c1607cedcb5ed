-- Listing an account's tasks newest first, a page at a time (`GET /v1/tasks`): the cursor compares
-- (created_ms, task_id), so the index orders by both.
DROP INDEX tasks_by_account;
CREATE INDEX tasks_by_account ON tasks (account, created_ms, task_id);
