"""Chaos run (``make chaos``): faults against real worker processes, PostgreSQL and Temporal,
then a check of the ledger. See docs/operations.md, "Chaos run"."""
