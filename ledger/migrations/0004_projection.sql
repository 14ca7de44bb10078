-- threadwarden ledger, version 4: a disposable thread-summary projection.
-- Rebuilt from the ledger at any time: kept after commits, backfilled by the maintenance pass.
CREATE TABLE threadwarden.thread_summaries (
    thread_id      text PRIMARY KEY COLLATE "C" REFERENCES threadwarden.threads (thread_id),
    host_id        text NOT NULL COLLATE "C",
    last_sequence  bigint NOT NULL,
    last_kind      text,
    states         jsonb NOT NULL,
    refreshed_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX thread_summaries_host ON threadwarden.thread_summaries (host_id);
