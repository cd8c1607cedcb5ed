-- The slots in use per pool and key, kept with upstream_slots' rows under the pool's lock: a take reads a
-- row per key instead of counting every running task's row.
CREATE TABLE upstream_slot_counts (
    pool  text NOT NULL,
    key   integer NOT NULL,
    used  integer NOT NULL,
    PRIMARY KEY (pool, key)
);
INSERT INTO upstream_slot_counts (pool, key, used)
SELECT pool, key, count(*) FROM upstream_slots GROUP BY pool, key;
