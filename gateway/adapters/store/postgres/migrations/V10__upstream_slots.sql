-- The upstream's running slots, shared by the replicas: a row per task the upstream has (or is being sent),
-- counted against its key's cap while the replica that holds it beats.
CREATE TABLE upstream_slots (
    holder   text PRIMARY KEY,      -- the task id and the key: "task-.../2"
    pool     text NOT NULL,         -- region and model code
    key      integer NOT NULL,
    replica  text NOT NULL
);
CREATE INDEX upstream_slots_by_pool ON upstream_slots (pool);
