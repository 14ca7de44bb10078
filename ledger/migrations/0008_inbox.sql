-- threadwarden ledger, version 8: the operator inbox.
-- `threadwarden inbox` lists the submissions that wait for a person (a pending approval:
-- suspended; an unknown side effect: unknown) across every thread, oldest first. This partial
-- index holds only those rows, in that order, so the listing reads neither settled nor queued
-- submissions however many there are, and stops after its limit. `state` is already in the
-- predicate of submissions_lane, so the index costs no HOT update that was possible before.
CREATE INDEX submissions_waiting ON threadwarden.submissions (created_at, submission_id)
    WHERE state IN ('suspended', 'unknown');
