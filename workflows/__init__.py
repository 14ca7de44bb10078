"""Deterministic Temporal code: the host maintenance workflow, the sweeper and pure decisions."""
