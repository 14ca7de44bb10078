-- threadwarden ledger, version 11: heads handed over to their agent's queue
-- (docs/architecture.md, "The route of a head").

-- An inline binding's attempt that ran past its inline budget gave its head back: every later
-- attempt of that submission is dispatched to the agent's task queue, never run inline again.
ALTER TABLE threadwarden.submissions ADD COLUMN handed_off boolean NOT NULL DEFAULT false;
