-- Each account's webhook settings (secrets, default endpoint, disabled endpoints) as one record.
CREATE TABLE webhook_settings (
    account  text PRIMARY KEY,
    record   bytea NOT NULL
);
-- Deliveries of task ends, queued in the transaction that ends the task. A pending one due is leased to
-- one replica at a time (`lease_until_ms`) while it is attempted.
CREATE TABLE deliveries (
    id               text PRIMARY KEY,
    account          text NOT NULL,
    task_id          text NOT NULL,
    state            text NOT NULL,
    next_attempt_ms  bigint NOT NULL,
    lease_until_ms   bigint NOT NULL DEFAULT 0,
    record           bytea NOT NULL
);
CREATE INDEX deliveries_due ON deliveries (next_attempt_ms) WHERE state = 'pending';
CREATE INDEX deliveries_by_task ON deliveries (task_id);
