"""Connection pools with JSON codecs installed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

if TYPE_CHECKING:  # asyncpg's classes are generic only in its stubs
    Connection: TypeAlias = asyncpg.Connection[Any] | PoolConnectionProxy[Any]
else:
    Connection = asyncpg.Connection | PoolConnectionProxy
"""A connection as repositories receive it: direct, or borrowed from a pool."""


async def _init_connection(conn: asyncpg.Connection[Any]) -> None:
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool[Any]:
    """A pool whose connections read and write json/jsonb as Python values."""
    pool = await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=_init_connection
    )
    assert pool is not None
    return pool
