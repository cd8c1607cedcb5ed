-- The line of jobs waiting for an upstream slot, shared by the replicas so that whichever sees a slot free
-- sends the job next across all of them: start-time fair queuing across accounts (domain::capacity).
CREATE TABLE slot_line (
    holder       text PRIMARY KEY,     -- the task's id, or a synchronous call's
    pool         text NOT NULL,        -- region and model code
    account      text NOT NULL,
    tag          bigint NOT NULL,      -- virtual start tag
    arrival      bigserial,            -- breaks ties between equal tags; 0 for a job waiting again
    tried        integer[] NOT NULL,   -- keys that refused or failed it, tried last
    deadline_ms  bigint NOT NULL,
    since_ms     bigint NOT NULL,
    replica      text                  -- a call's replica, which alone can send it; NULL for a task
);
CREATE INDEX slot_line_order ON slot_line (pool, tag, arrival);

-- Each pool's clock (the tag of the job served last) and each account's next start tag in it.
CREATE TABLE slot_line_clocks (
    pool  text PRIMARY KEY,
    now   bigint NOT NULL
);
CREATE TABLE slot_line_accounts (
    pool      text NOT NULL,
    account   text NOT NULL,
    next_tag  bigint NOT NULL,
    PRIMARY KEY (pool, account)
);
