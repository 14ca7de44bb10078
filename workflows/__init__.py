"""Deterministic Temporal code: the host maintenance workflow, its passes and the sweeper."""
