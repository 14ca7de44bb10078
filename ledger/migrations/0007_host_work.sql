-- threadwarden ledger, version 7: host work recorded durably by the host plug-in's producers.
-- On the host row so that every step which sets the alarm reads it under the row lock (a mark
-- can never be lost to a finish that read the plug-in's deadline earlier): set with the alarm
-- armed in the same statement (the host is not made dirty), taken by the first host wave of
-- the pass that finds it due, put back when that wave fails or is cut off.
ALTER TABLE threadwarden.hosts ADD COLUMN host_work_due_at timestamptz;
