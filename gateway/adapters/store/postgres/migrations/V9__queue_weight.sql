-- An account's share of the upstream's slots when its tasks wait for one (1 unless an operator set it).
ALTER TABLE accounts ADD COLUMN queue_weight integer;
