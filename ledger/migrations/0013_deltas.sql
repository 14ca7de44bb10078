-- threadwarden ledger, version 13: the text of a model response while it is generated
-- (docs/agents.md, "Streaming"). Off the journal: never a record, never replayed.

-- One row per journal step that streams: the text so far, for a reader that arrives mid-step
-- (it gets this first, then each NOTIFY on threadwarden_deltas). Unlogged: a crash may lose it,
-- and nothing needs it then (the step streams afresh, or its response is journaled). The
-- attempt's epoch tells a re-run's text from a cut-off attempt's.
CREATE UNLOGGED TABLE threadwarden.deltas (
    submission_id text NOT NULL,
    step          integer NOT NULL,
    thread_id     text NOT NULL,
    epoch         bigint NOT NULL,
    text          text NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (submission_id, step)
);
CREATE INDEX deltas_thread ON threadwarden.deltas (thread_id);
