"""Ledger repositories with default settings, on the test's fresh database, and the set-ups
the ledger tests share: a claimed head, a parent host for children."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tests.helpers.children import Family
from tests.helpers.ledger import Ledger
from tests.helpers.scene import MIN_DELAY, Scene
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.protocol.decisions import Timing


@pytest.fixture
def maintenance(pool: asyncpg.Pool[Any]) -> Maintenance:
    """Host-row pass steps with the default timing (base 100 ms, cap 5 s, floor 50 ms)."""
    return Maintenance(pool, Timing())


@pytest.fixture
def attempts(pool: asyncpg.Pool[Any]) -> Attempts:
    """Claims and fenced writes with the default 30 s lease."""
    return Attempts(pool, lease_ms=30_000)


@pytest.fixture
def admissions(pool: asyncpg.Pool[Any]) -> Admissions:
    """Admissions with the default 50 ms alarm floor."""
    return Admissions(pool, minimum_alarm_delay_ms=50)


@pytest.fixture
def scene(pool: asyncpg.Pool[Any], ids: str) -> Scene:
    """The test's host with default timing, a 30 s lease and a 50 ms admission floor."""
    admissions = Admissions(pool, minimum_alarm_delay_ms=MIN_DELAY)
    return Scene(
        pool, Maintenance(pool, Timing()), Attempts(pool, lease_ms=30_000), admissions, ids
    )


@pytest.fixture
def ledger(pool: asyncpg.Pool[Any]) -> Ledger:
    """The repositories with the default timing, a 30 s lease and a 50 ms alarm floor."""
    return Ledger.defaults(pool)


@pytest.fixture
async def claim(ledger: Ledger, ids: str) -> Claim:
    """An ``echo`` submission on the test's host, admitted and claimed in a begun pass: for
    tests of what a running attempt, or the pass around it, may write."""
    await ledger.admit(ids)
    return await ledger.claim(ids)


@pytest.fixture
def family(pool: asyncpg.Pool[Any], ids: str) -> Family:
    """A parent host ``{ids}-p`` with the ledger repositories and `Children`."""
    return Family.on(pool, ids)
