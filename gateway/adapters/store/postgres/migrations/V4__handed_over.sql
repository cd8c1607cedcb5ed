-- A task the upstream accepted is handed to the replica whose turn its creation time falls in: it names
-- that replica as its lease owner, flagged until the replica takes it with its next claim.
ALTER TABLE tasks ADD COLUMN handed_over boolean NOT NULL DEFAULT false;
CREATE INDEX tasks_handed_over ON tasks (lease_owner) WHERE handed_over;
-- Replicas that take handed tasks (this version on): a replica of an earlier version is never handed one.
ALTER TABLE replicas ADD COLUMN takes_handovers boolean NOT NULL DEFAULT false;
-- A replica's live tasks by id: its poller checks, a page at a time, that it has every one.
CREATE INDEX tasks_leased ON tasks (lease_owner, task_id) WHERE status IN ('queued', 'running');
