"""Fixtures of the bench's tests (no services: hand-made figures)."""

from __future__ import annotations

import pytest

from bench.side import Shape


@pytest.fixture
def shape() -> Shape:
    """The run that hand-made figures stand for: 2 hosts × 5 units, one worker."""
    return Shape(hosts=2, submissions=5, workers=1, timeout_s=300.0)
