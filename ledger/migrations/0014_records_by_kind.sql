-- threadwarden ledger, version 14: a thread's records of one kind, in order (docs/bindings.md,
-- "history_kinds").

-- A claim loads its binding's history by kind: the newest summary, then the records of the
-- binding's kinds after the sequence it covers, or the newest records of each kind. Through
-- the primary key alone it walked the thread newest first past every record of the other
-- kinds (all of them, for a binding that read none it could find), so a turn cost more the
-- longer its thread grew. With this index each read is a range scan from where its answer
-- starts to where it ends. Built in the migration's transaction: it holds writes to records
-- for as long as the build takes.
CREATE INDEX records_by_kind ON threadwarden.records (thread_id, kind, sequence);
