"""Connection pools with JSON codecs installed and a bounded wait for a connection."""

from __future__ import annotations

import json
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, TypeAlias

import asyncpg
from asyncpg.connection import LoggedQuery
from asyncpg.pool import PoolAcquireContext, PoolConnectionProxy

from threadwarden.errors import PoolExhausted

if TYPE_CHECKING:  # asyncpg's classes are generic only in its stubs
    Connection: TypeAlias = asyncpg.Connection[Any] | PoolConnectionProxy[Any]
    _Pool: TypeAlias = asyncpg.Pool[Any]
    _AcquireContext: TypeAlias = PoolAcquireContext[Any]
else:
    Connection = asyncpg.Connection | PoolConnectionProxy
    _Pool = asyncpg.Pool
    _AcquireContext = PoolAcquireContext
"""A connection as repositories receive it: direct, or borrowed from a pool."""

DEFAULT_ACQUIRE_TIMEOUT_MS = 5_000
"""How long an acquisition waits for a free connection unless told otherwise."""


async def _init_connection(conn: asyncpg.Connection[Any]) -> None:
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _keep_session(conn: asyncpg.Connection[Any]) -> None:
    """Release a connection without asyncpg's default reset query (advisory unlock, CLOSE ALL,
    UNLISTEN, RESET ALL): one round trip per release, on the hot path. asyncpg still rolls back
    an open transaction and drops listeners first; threadwarden keeps no other session state on
    pooled connections (a LISTEN on a pooled connection, as the client's ``result`` and
    ``records`` waits do, is UNLISTENed by its user before release; the migration lock is
    released in a ``finally``; nothing is ``SET`` for a session)."""


class BoundedPool(_Pool):
    """An asyncpg pool whose every acquisition waits at most ``acquire_timeout_ms``.

    That includes the acquisitions ``execute``/``fetch``/``fetchrow``/``fetchval`` make inside
    (asyncpg's pool calls ``self.acquire()`` for them). A caller passing its own ``timeout`` keeps
    it. When the wait runs out, `PoolExhausted` is raised instead of `TimeoutError`. asyncpg also
    applies the acquire timeout to the connection's reset when it is released.
    """

    __slots__ = ("_acquire_timeout_ms",)

    def __init__(self, *args: Any, acquire_timeout_ms: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._acquire_timeout_ms = acquire_timeout_ms

    @property
    def acquire_timeout_ms(self) -> int:
        return self._acquire_timeout_ms

    def acquire(self, *, timeout: float | None = None) -> _AcquireContext:
        bound = self._acquire_timeout_ms / 1000 if timeout is None else timeout
        return _BoundedAcquire(self, bound)

    def exhausted(self, waited_s: float | None) -> PoolExhausted:
        waited = self._acquire_timeout_ms if waited_s is None else round(waited_s * 1000)
        return PoolExhausted(
            f"database pool: no connection free within {waited} ms"
            f" (pool_max_size={self.get_max_size()})"
        )


class _BoundedAcquire(_AcquireContext):
    """asyncpg's acquire context, turning a timed-out wait into `PoolExhausted`."""

    __slots__ = ()

    async def __aenter__(self) -> PoolConnectionProxy[Any]:
        try:
            return await super().__aenter__()
        except TimeoutError as error:
            raise self._exhausted() from error

    def __await__(self) -> Generator[Any, None, PoolConnectionProxy[Any]]:
        try:
            return (yield from super().__await__())
        except TimeoutError as error:
            raise self._exhausted() from error

    def _exhausted(self) -> PoolExhausted:
        assert isinstance(self.pool, BoundedPool)
        return self.pool.exhausted(self.timeout)


def new_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    acquire_timeout_ms: int = DEFAULT_ACQUIRE_TIMEOUT_MS,
    on_query: Callable[[LoggedQuery], None] | None = None,
) -> BoundedPool:
    """`create_pool`'s pool, not yet opened: ``await`` it (inside the loop that will use it)
    before the first acquisition."""
    if acquire_timeout_ms < 1:
        raise ValueError("acquire_timeout_ms: expected at least 1")

    async def init(conn: asyncpg.Connection[Any]) -> None:
        await _init_connection(conn)
        if on_query is not None:
            conn.add_query_logger(on_query)

    # Constructed as asyncpg.create_pool does, with its defaults.
    return BoundedPool(
        dsn,
        acquire_timeout_ms=acquire_timeout_ms,
        min_size=min_size,
        max_size=max_size,
        max_queries=50_000,
        max_inactive_connection_lifetime=300.0,
        init=init,
        reset=_keep_session,
        loop=None,
        connection_class=asyncpg.Connection,
        record_class=asyncpg.Record,
    )


async def create_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    acquire_timeout_ms: int = DEFAULT_ACQUIRE_TIMEOUT_MS,
    on_query: Callable[[LoggedQuery], None] | None = None,
) -> asyncpg.Pool[Any]:
    """A pool whose connections read and write json/jsonb as Python values and whose
    acquisitions give up after ``acquire_timeout_ms`` with `PoolExhausted` (never hang).

    ``on_query`` sees every statement the pool's connections run (tests count them with it).
    """
    pool = new_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        acquire_timeout_ms=acquire_timeout_ms,
        on_query=on_query,
    )
    await pool
    return pool
