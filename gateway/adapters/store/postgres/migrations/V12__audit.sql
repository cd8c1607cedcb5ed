-- The audit trail and the named operators. The trail is append-only: a trigger refuses any UPDATE or DELETE
-- of it, whoever runs them (retention included).
CREATE TABLE operators (
    name        text PRIMARY KEY,
    token_hash  text NOT NULL UNIQUE,
    record      bytea NOT NULL
);

CREATE TABLE audit_log (
    seq       bigserial PRIMARY KEY,
    at_ms     bigint NOT NULL,
    operator  text NOT NULL,
    action    text NOT NULL,
    account   text,
    entry     bytea NOT NULL
);
CREATE INDEX audit_log_by_account ON audit_log (account, seq);

CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only';
END;
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
