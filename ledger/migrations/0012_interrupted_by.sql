-- threadwarden ledger, version 12: what a second message did mid-turn (docs/api.md, "if_busy").

-- The submission admitted with if_busy "interrupt" that asked this one to abort: its receipt,
-- repeated for the same idempotency key, lists the same interrupted submissions.
ALTER TABLE threadwarden.submissions ADD COLUMN interrupted_by text;
