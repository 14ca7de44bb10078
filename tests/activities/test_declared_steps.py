"""A step's declared length (issue 39), on the journal itself: an inline attempt with less of its
budget left than a step declares yields before the step (nothing of it recorded or run); a
dispatched attempt runs it whatever it declares; a length is a non-negative integer. The route
end to end: tests/e2e/test_inline_budget.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from tests.helpers.ledger import Ledger
from threadwarden.activities.context import JournaledContext
from threadwarden.activities.endings import Yield
from threadwarden.activities.journal import Journal
from threadwarden.errors import InvalidInput

LATER = datetime.now(UTC) + timedelta(days=1)


async def _context(pool: asyncpg.Pool[Any], ids: str, inline_left_ms: int | None) -> Any:
    """A context on a fresh claim: inline with ``inline_left_ms`` of its budget left, or
    dispatched (None)."""
    ledger = Ledger.defaults(pool)
    await ledger.admit(ids)
    claim = await ledger.claim(ids)
    until = None
    if inline_left_ms is not None:
        until = datetime.now(UTC) + timedelta(milliseconds=inline_left_ms)
    return JournaledContext(Journal(claim, ledger.attempts, LATER, inline_until=until))


async def _records(pool: asyncpg.Pool[Any], thread: str) -> list[str]:
    rows = await pool.fetch(
        "SELECT kind FROM threadwarden.records WHERE thread_id = $1 ORDER BY sequence", thread
    )
    return [row["kind"] for row in rows]


async def test_an_inline_attempt_yields_before_a_step_longer_than_its_budget_left(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    context = await _context(pool, ids, inline_left_ms=60_000)
    ran: list[str] = []

    async def run(args: dict[str, Any]) -> str:
        ran.append(args["n"])
        return str(args["n"])

    assert await context.tool("fits", {"n": "1"}, run, expected_ms=1_000) == "1"
    with pytest.raises(Yield):
        await context.tool("too-long", {"n": "2"}, run, expected_ms=120_000)
    assert ran == ["1"]  # the long one never ran, nor recorded its call
    assert await _records(pool, ids) == ["tool-call", "tool-result"]
    with pytest.raises(Yield):
        context.before_long_step(120_000)
    context.before_long_step(1_000)  # fits: nothing happens


async def test_a_dispatched_attempt_runs_a_declared_step_whatever_its_length(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    context = await _context(pool, ids, inline_left_ms=None)

    async def run(_: dict[str, Any]) -> str:
        return "done"

    context.before_long_step(3_600_000)
    assert await context.tool("long", {}, run, expected_ms=3_600_000) == "done"
    assert await _records(pool, ids) == ["tool-call", "tool-result"]


@pytest.mark.parametrize("length", [-1, True, 1.5])
async def test_a_declared_length_is_a_non_negative_integer(
    pool: asyncpg.Pool[Any], ids: str, length: Any
) -> None:
    context = await _context(pool, ids, inline_left_ms=None)

    async def run(_: dict[str, Any]) -> None:
        raise AssertionError("never run")

    with pytest.raises(InvalidInput) as raised:
        await context.tool("t", {}, run, expected_ms=length)
    assert raised.value.field == "expected_ms"
    with pytest.raises(InvalidInput):
        context.before_long_step(length)
    assert await _records(pool, ids) == []
