"""Pool acquisition is bounded: an exhausted pool raises `PoolExhausted`, it never hangs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from threadwarden.errors import PoolExhausted, ThreadwardenError
from threadwarden.ledger.pool import DEFAULT_ACQUIRE_TIMEOUT_MS, BoundedPool, create_pool

HANG_GUARD_S = 30
"""Only a guard against a hang (the failure this file is about); never a measured threshold."""


@asynccontextmanager
async def one_connection(
    database_url: str, acquire_timeout_ms: int = DEFAULT_ACQUIRE_TIMEOUT_MS
) -> AsyncIterator[asyncpg.Pool[Any]]:
    """A pool of one connection, closed after; the test body runs under the hang guard."""
    pool = await create_pool(
        database_url, min_size=1, max_size=1, acquire_timeout_ms=acquire_timeout_ms
    )
    try:
        async with asyncio.timeout(HANG_GUARD_S):
            yield pool
    finally:
        await pool.close()


async def test_a_second_acquire_on_a_full_pool_raises_pool_exhausted(database_url: str) -> None:
    async with (
        one_connection(database_url, acquire_timeout_ms=100) as pool,
        pool.acquire() as held,
    ):
        assert await held.fetchval("SELECT 1") == 1
        with pytest.raises(PoolExhausted) as raised:
            async with pool.acquire():
                pass
        assert str(raised.value) == (
            "database pool: no connection free within 100 ms (pool_max_size=1)"
        )
        assert isinstance(raised.value, ThreadwardenError)
        with pytest.raises(PoolExhausted):
            await pool.acquire()  # the await form, too


async def test_the_pools_own_queries_are_bounded_too(database_url: str) -> None:
    async with one_connection(database_url, acquire_timeout_ms=100) as pool:
        async with pool.acquire():
            for query in (pool.fetchval, pool.fetchrow, pool.fetch, pool.execute):
                with pytest.raises(PoolExhausted):
                    await query("SELECT 1")
        # Released: the pool serves again, with its JSON codecs.
        assert await pool.fetchval("SELECT $1::jsonb", {"a": [1]}) == {"a": [1]}


async def test_a_callers_own_timeout_wins(database_url: str) -> None:
    async with one_connection(database_url) as pool:
        assert isinstance(pool, BoundedPool)
        assert pool.acquire_timeout_ms == DEFAULT_ACQUIRE_TIMEOUT_MS
        async with pool.acquire():
            with pytest.raises(PoolExhausted, match="within 50 ms"):
                async with pool.acquire(timeout=0.05):
                    pass


async def test_a_waiter_gets_the_connection_when_it_is_released(database_url: str) -> None:
    async with one_connection(database_url, acquire_timeout_ms=20_000) as pool:
        held = await pool.acquire()
        waiter = asyncio.ensure_future(pool.fetchval("SELECT 2"))
        await asyncio.sleep(0)  # let the waiter start: it cannot finish while `held` is out
        assert not waiter.done()
        await pool.release(held)
        assert await waiter == 2


async def test_an_acquire_timeout_below_one_ms_is_refused(database_url: str) -> None:
    with pytest.raises(ValueError, match="acquire_timeout_ms"):
        await create_pool(database_url, acquire_timeout_ms=0)
