-- A task the upstream accepted is handed to the replica whose turn its creation time falls in: it names
-- that replica as its lease owner, flagged until the replica takes it with its next claim.
ALTER TABLE tasks ADD COLUMN handed_over boolean NOT NULL DEFAULT false;
CREATE INDEX tasks_handed_over ON tasks (lease_owner) WHERE handed_over;
