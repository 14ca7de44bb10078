-- threadwarden ledger, version 14: reads bounded by what they return, not by a thread's length
-- (docs/bindings.md, "What a claim loads").

-- A claim loads its binding's history by kind: the newest summary, then the records of the
-- binding's kinds after the sequence it covers, or the newest records of each kind. Through
-- the primary key alone it walked the thread newest first past every record of the other
-- kinds (all of them, for a binding that read none it could find), so a turn cost more the
-- longer its thread grew. With this index each read is a range scan from where its answer
-- starts to where it ends.
CREATE INDEX records_by_kind ON threadwarden.records (thread_id, kind, sequence);

-- An interrupting admission repeated with its idempotency key lists again the submissions it
-- interrupted: without an index on the column that names it, that read every submission of
-- the ledger. Partial: the few rows an interrupt marked, nothing for the rest.
CREATE INDEX submissions_interrupted ON threadwarden.submissions (interrupted_by)
    WHERE interrupted_by IS NOT NULL;

-- Both are built in the migration's transaction: each holds writes to its table for as long
-- as the build takes.
