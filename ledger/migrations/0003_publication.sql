-- threadwarden ledger, version 3: the publication outbox.
-- One row per canonical record not yet published to every sink; deleted once published
-- (at-least-once: a crash after publishing and before the delete publishes it again).
CREATE TABLE threadwarden.publications (
    record_id   text PRIMARY KEY REFERENCES threadwarden.records (record_id),
    host_id     text NOT NULL COLLATE "C",
    thread_id   text NOT NULL COLLATE "C",
    sequence    bigint NOT NULL,
    attempts    integer NOT NULL DEFAULT 0,
    not_before  timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_error  text
);
CREATE INDEX publications_due ON threadwarden.publications (host_id, not_before);

-- Records written before this version count as published.
