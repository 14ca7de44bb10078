-- threadwarden ledger, version 10: framework checkpoints (docs/bindings.md, "Checkpoints").

-- State an agent framework saves to resume from (a LangGraph checkpoint or pending writes),
-- opaque to threadwarden: written under the attempt's fence, read back by the next attempt of
-- the submission (all of its rows) and by the thread's next submission (the newest `carry` row
-- of a submission that settled completed). `step` is the journal position when it was saved:
-- a binding that resumes from it moves its step counter there (AttemptContext.advance_to).
CREATE TABLE threadwarden.checkpoints (
    thread_id      text NOT NULL COLLATE "C",
    sequence       bigint GENERATED ALWAYS AS IDENTITY,
    submission_id  text NOT NULL COLLATE "C",
    epoch          bigint NOT NULL,
    step           integer NOT NULL CHECK (step >= 0),
    carry          boolean NOT NULL,
    meta           jsonb NOT NULL,
    data           bytea NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (thread_id, sequence)
);
-- An attempt reads its submission's rows, in order.
CREATE INDEX checkpoints_of_submission ON threadwarden.checkpoints (submission_id, sequence);
-- A new submission reads the thread's newest carried row (newest first, few rows skipped).
CREATE INDEX checkpoints_carried ON threadwarden.checkpoints (thread_id, sequence DESC)
    WHERE carry;
