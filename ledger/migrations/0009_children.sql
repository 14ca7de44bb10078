-- threadwarden ledger, version 9: subagent children (docs/protocol.md, "Subagent children").

-- The parent linkage of a child submission: which submission's tool call (journal step)
-- delegated to it. Written in the child's admission transaction, never changed afterwards. No
-- foreign key: the value is written only by establishment, under the parent's fence, and an RI
-- trigger would fire on every admission.
ALTER TABLE threadwarden.submissions ADD COLUMN parent_submission_id text COLLATE "C";
ALTER TABLE threadwarden.submissions ADD COLUMN parent_call_step integer;
ALTER TABLE threadwarden.submissions ADD CONSTRAINT submissions_parent_linkage
    CHECK ((parent_submission_id IS NULL) = (parent_call_step IS NULL));
-- One child per call, whatever thread the call names; establishment resolves through it.
CREATE UNIQUE INDEX submissions_one_child_per_call
    ON threadwarden.submissions (parent_submission_id, parent_call_step)
    WHERE parent_submission_id IS NOT NULL;

-- The linkage is immutable once written (fires only for updates naming its columns).
CREATE FUNCTION threadwarden.refuse_linkage_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'threadwarden.submissions: the parent linkage of % is immutable',
        OLD.submission_id USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER submissions_linkage_immutable
    BEFORE UPDATE OF parent_submission_id, parent_call_step ON threadwarden.submissions
    FOR EACH ROW
    WHEN (OLD.parent_submission_id IS NOT NULL
          AND (OLD.parent_submission_id IS DISTINCT FROM NEW.parent_submission_id
               OR OLD.parent_call_step IS DISTINCT FROM NEW.parent_call_step))
    EXECUTE FUNCTION threadwarden.refuse_linkage_change();

-- One lineage record per child, as one settlement per submission.
CREATE UNIQUE INDEX records_one_lineage ON threadwarden.records (submission_id)
    WHERE kind = 'lineage';

-- The child-settled marker, on the parent's host: written once per (parent, child) with the
-- child's canonical outcome, through the mutation gate of the parent's host. The parent's
-- suspend reads it, so a child settled before the parent suspended is never waited for.
CREATE TABLE threadwarden.child_settlements (
    parent_submission_id  text NOT NULL COLLATE "C"
                              REFERENCES threadwarden.submissions (submission_id),
    child_submission_id   text NOT NULL COLLATE "C"
                              REFERENCES threadwarden.submissions (submission_id),
    parent_host_id        text NOT NULL COLLATE "C",
    outcome               text NOT NULL CHECK (outcome IN ('completed', 'failed', 'aborted')),
    recorded_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (parent_submission_id, child_submission_id)
);
