-- The replicas serving from this database, each seen every second while it runs: how many share the
-- upstream keys' query limits, and whose task leases are still good. A replica that stopped beating stays
-- listed until its tasks are taken over.
CREATE TABLE replicas (
    id       text PRIMARY KEY,
    seen_ms  bigint NOT NULL
);
CREATE INDEX tasks_by_lease ON tasks (lease_owner) WHERE status IN ('queued', 'running');
-- The replica that submitted the task: it holds the task's lease until it stops.
ALTER TABLE tasks ADD COLUMN submitted_by text;
-- Each account's unfinished tasks, counted in the transactions that add and end them: the per-account limit
-- holds across replicas.
ALTER TABLE accounts ADD COLUMN in_flight integer NOT NULL DEFAULT 0 CHECK (in_flight >= 0);
UPDATE accounts SET in_flight = (SELECT count(*) FROM tasks
    WHERE tasks.account = accounts.name AND status IN ('queued', 'running'));
