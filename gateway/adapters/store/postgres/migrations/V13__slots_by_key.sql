-- A take counts a pool's slots by key: with the key in the index, the count reads the index alone.
CREATE INDEX upstream_slots_by_pool_key ON upstream_slots (pool, key);
DROP INDEX upstream_slots_by_pool;
