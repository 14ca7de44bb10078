-- threadwarden ledger, version 2: the agent runtime's journal, aborts and staged settlement.

-- Every record a binding writes carries the step of the binding's journal it belongs to, so a
-- re-run attempt replays committed steps instead of repeating them.
ALTER TABLE threadwarden.records ADD COLUMN step integer;
CREATE UNIQUE INDEX records_one_per_step ON threadwarden.records (submission_id, step, kind)
    WHERE step IS NOT NULL;
CREATE INDEX records_by_submission ON threadwarden.records (submission_id, sequence);

-- Abort of a running submission: its attempt stops at the next committed boundary.
ALTER TABLE threadwarden.submissions ADD COLUMN abort_requested boolean NOT NULL DEFAULT false;
-- Settlement in three idempotent steps: reserve (terminalizing + the reserved outcome), append
-- the settlement record, finalize (settled). Recovery finishes a reserved settlement.
ALTER TABLE threadwarden.submissions ADD COLUMN reserved_outcome text
    CHECK (reserved_outcome IN ('completed', 'failed', 'aborted'));
ALTER TABLE threadwarden.submissions ADD COLUMN reserved_result jsonb;
ALTER TABLE threadwarden.submissions ADD COLUMN reserved_reason text;
