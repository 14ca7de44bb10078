-- threadwarden ledger, version 5: messages between threads.
-- A binding's message is written to its source host's outbox in the attempt's transaction (with
-- a `message-sent` record on the source thread). Delivery claims it, admits it at the
-- destination thread (idempotent by message id) and records the receipt here.
CREATE TABLE threadwarden.messages (
    message_id                 text PRIMARY KEY COLLATE "C",
    source_host_id             text NOT NULL COLLATE "C",
    source_thread_id           text NOT NULL COLLATE "C",
    source_submission_id       text NOT NULL,
    destination_thread_id      text NOT NULL COLLATE "C",
    destination_host_id        text COLLATE "C",
    agent_id                   text NOT NULL,
    input                      jsonb NOT NULL,
    state                      text NOT NULL DEFAULT 'pending'
                                   CHECK (state IN ('pending', 'delivered', 'rejected')),
    attempts                   integer NOT NULL DEFAULT 0,
    not_before                 timestamptz NOT NULL DEFAULT clock_timestamp(),
    claim_token                text,
    destination_submission_id  text,
    last_error                 text,
    created_at                 timestamptz NOT NULL DEFAULT clock_timestamp(),
    delivered_at               timestamptz
);
-- Delivery's scan: a host's pending messages by due time (a claim pushes not_before to its
-- deadline, so an abandoned claim comes due again by itself).
CREATE INDEX messages_due ON threadwarden.messages (source_host_id, not_before)
    WHERE state = 'pending';

-- The destination submission links back to its source; one submission per message, whatever
-- races.
ALTER TABLE threadwarden.submissions ADD COLUMN source_thread_id text COLLATE "C";
ALTER TABLE threadwarden.submissions ADD COLUMN source_message_id text COLLATE "C";
CREATE UNIQUE INDEX submissions_one_per_message ON threadwarden.submissions (source_message_id)
    WHERE source_message_id IS NOT NULL;
