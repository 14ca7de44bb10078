-- threadwarden ledger, version 6: the projection's pending deadline.
-- On the host row so a caught-up pass reads it in O(1): set when a projection refresh after a
-- commit failed, a backfill batch left work behind, or an operator asked for a rebuild; cleared
-- by the backfill batch that finds nothing left.
ALTER TABLE threadwarden.hosts ADD COLUMN projection_due_at timestamptz;
