-- Secrets every replica signs with (result links, console sessions), made by the first replica to start
-- unless the environment gives one.
CREATE TABLE secrets (
    name   text PRIMARY KEY,
    value  bytea NOT NULL
);
