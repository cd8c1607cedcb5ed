-- Requests each API key made in each second, counted by every replica together (an unlogged table: a count
-- need not outlive a crash), so a key's request rate holds however its load is spread.
CREATE UNLOGGED TABLE key_rates (
    hash    bytea NOT NULL,
    second  bigint NOT NULL,
    used    integer NOT NULL,
    PRIMARY KEY (hash, second)
);
