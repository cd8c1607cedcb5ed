-- mediagate's schema on PostgreSQL. Money is integer micro-units (bigint); a task's full record is kept as
-- the same MessagePack bytes the embedded store writes (`record`), beside the columns queries select on.

CREATE TABLE accounts (
    name        text PRIMARY KEY,
    created_at  text NOT NULL,
    plan        text
);

CREATE TABLE api_keys (
    hash        bytea PRIMARY KEY,
    account     text NOT NULL REFERENCES accounts (name),
    prefix      text NOT NULL,
    created_at  text NOT NULL,
    revoked     boolean NOT NULL DEFAULT false
);
CREATE INDEX api_keys_by_account ON api_keys (account);

-- Each account's pots: the sums of its ledger entries, kept in the transaction that appends them. The row is
-- locked (FOR UPDATE) by every decision to spend from the account, so concurrent spending serialises here.
CREATE TABLE funds (
    account     text PRIMARY KEY,
    free_trial  bigint NOT NULL DEFAULT 0 CHECK (free_trial >= 0),
    plan        bigint NOT NULL DEFAULT 0 CHECK (plan >= 0),
    balance     bigint NOT NULL DEFAULT 0 CHECK (balance >= 0)
);

CREATE TABLE ledger (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account     text NOT NULL,
    kind        text NOT NULL,
    pot         text NOT NULL,
    delta       bigint NOT NULL,
    task_id     text,
    at_ms       bigint NOT NULL,
    note        text NOT NULL DEFAULT ''
);
CREATE INDEX ledger_by_account ON ledger (account, seq);
CREATE INDEX ledger_by_task ON ledger (task_id) WHERE task_id IS NOT NULL;

CREATE TABLE tasks (
    task_id           text PRIMARY KEY,
    account           text NOT NULL,
    status            text NOT NULL,
    created_ms        bigint NOT NULL,
    ended_ms          bigint,
    upstream_task_id  text,
    -- The replica polling the task: its lease lasts while that replica beats (see `replicas`).
    lease_owner       text,
    next_poll_ms      bigint NOT NULL,
    record            bytea NOT NULL
);
CREATE INDEX tasks_live ON tasks (next_poll_ms) WHERE status IN ('queued', 'running');
CREATE INDEX tasks_by_account ON tasks (account, created_ms);
CREATE INDEX tasks_by_end ON tasks (ended_ms) WHERE ended_ms IS NOT NULL;

CREATE TABLE idempotency (
    key         text PRIMARY KEY,
    body_hash   text NOT NULL,
    task_id     text NOT NULL
);

CREATE TABLE model_switches (
    model       text PRIMARY KEY,
    enabled     boolean NOT NULL
);
