-- threadwarden ledger, version 1: hosts, threads, submissions, canonical records.
CREATE SCHEMA IF NOT EXISTS threadwarden;

CREATE TABLE threadwarden.hosts (
    host_id               text PRIMARY KEY COLLATE "C",
    dirty                 bigint NOT NULL DEFAULT 1,
    processed             bigint NOT NULL DEFAULT 0,
    nonterminal           integer NOT NULL DEFAULT 0,
    last_served_thread_id text COLLATE "C",
    retry                 jsonb,
    binding_retries       jsonb NOT NULL DEFAULT '[]'::jsonb,
    alarm_at              timestamptz,
    pass_epoch            bigint NOT NULL DEFAULT 0,
    last_outcome          text,
    last_error            text,
    created_at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK (processed <= dirty)
);
-- The sweeper's scan: only hosts with an alarm.
CREATE INDEX hosts_alarm_at ON threadwarden.hosts (alarm_at) WHERE alarm_at IS NOT NULL;

CREATE TABLE threadwarden.threads (
    thread_id       text PRIMARY KEY COLLATE "C",
    host_id         text NOT NULL COLLATE "C" REFERENCES threadwarden.hosts (host_id),
    next_sequence   bigint NOT NULL DEFAULT 1,
    next_record     bigint NOT NULL DEFAULT 1,
    producer_epoch  bigint NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX threads_host ON threadwarden.threads (host_id, thread_id);

CREATE TABLE threadwarden.submissions (
    submission_id     text PRIMARY KEY COLLATE "C",
    thread_id         text NOT NULL COLLATE "C" REFERENCES threadwarden.threads (thread_id),
    sequence          bigint NOT NULL,
    idempotency_key   text NOT NULL,
    payload_digest    text NOT NULL,
    agent_id          text NOT NULL,
    agent_digest      text,
    input             jsonb NOT NULL,
    state             text NOT NULL CHECK (state IN (
                          'admitted', 'ready', 'running', 'input-applied', 'terminalizing',
                          'settled', 'suspended', 'unknown')),
    outcome           text CHECK (outcome IN ('completed', 'failed', 'aborted')),
    reason            text,
    attempts          integer NOT NULL DEFAULT 0,
    epoch             bigint NOT NULL DEFAULT 0,
    attempt_id        text,
    ownership_token   text,
    lease_expires_at  timestamptz,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    settled_at        timestamptz,
    UNIQUE (thread_id, sequence),
    UNIQUE (thread_id, idempotency_key),
    CHECK ((state = 'settled') = (outcome IS NOT NULL))
);
-- The lane scan: nonterminal rows per thread in FIFO order.
CREATE INDEX submissions_lane ON threadwarden.submissions (thread_id, sequence)
    WHERE state <> 'settled';

CREATE TABLE threadwarden.records (
    thread_id      text NOT NULL COLLATE "C" REFERENCES threadwarden.threads (thread_id),
    sequence       bigint NOT NULL,
    record_id      text NOT NULL UNIQUE,
    submission_id  text NOT NULL REFERENCES threadwarden.submissions (submission_id),
    kind           text NOT NULL,
    body           jsonb NOT NULL,
    epoch          bigint NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (thread_id, sequence)
);
-- Exactly one settlement per submission, whatever races.
CREATE UNIQUE INDEX records_one_settlement ON threadwarden.records (submission_id)
    WHERE kind = 'settlement';

-- Canonical history is append-only.
CREATE FUNCTION threadwarden.refuse_record_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'threadwarden.records is append-only' USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER records_append_only BEFORE UPDATE OR DELETE ON threadwarden.records
    FOR EACH ROW EXECUTE FUNCTION threadwarden.refuse_record_change();
