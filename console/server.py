"""Serving the console with uvicorn: `serving` runs it beside the caller until it leaves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import asyncpg
import uvicorn
from temporalio.client import Client

from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.settings import Settings
from threadwarden.console.app import create_app
from threadwarden.console.security import check_bind
from threadwarden.errors import ThreadwardenError
from threadwarden.ledger.pool import create_pool
from threadwarden.reading.shared import LedgerFeed

logger = logging.getLogger(__name__)

CONSOLE_POOL_SIZE = 20
"""Connections of the pool a console opens: one listens for every live reader
(`threadwarden.reading.shared.LedgerFeed`), the pages, the API and the readers' short reads share
the rest."""


def console_url(host: str, port: int) -> str:
    """The URL a browser on this machine opens (an all-interfaces bind: its loopback)."""
    shown = host or "127.0.0.1"
    if shown in ("0.0.0.0", "::"):
        shown = "127.0.0.1"
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the command that runs the console owns Ctrl-C."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving(
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    settings: Settings,
    *,
    temporal_ui_url: str | None = None,
) -> AsyncIterator[str]:
    """Serve the console on ``settings.console_address`` until the block ends; yields its URL.

    A host other than loopback without ``console_token`` or ``api_token`` is refused
    (`InvalidInput` naming ``console_address``) before anything listens.
    """
    host, port = settings.console_bind
    token = settings.console_token or settings.api_token
    check_bind(host, token.get_secret_value() if token else None)
    app = create_app(client, pool, settings, temporal_ui_url=temporal_ui_url)
    config = uvicorn.Config(
        app,
        host=host or "0.0.0.0",
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
        server_header=False,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            with contextlib.suppress(SystemExit):  # uvicorn exits when it cannot bind
                task.result()
            raise ThreadwardenError(f"console: could not listen on {settings.console_address}")
        await asyncio.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()
    url = console_url(host, int(bound[1]))
    feed = app.state.console.feed
    try:
        yield url
    finally:
        feed.end_streams()  # the live streams end first: their clients see a clean close
        await _streams_ended(feed)
        server.should_exit = True
        await task
        await feed.close()


async def _streams_ended(feed: LedgerFeed, wait_s: float = 1.0) -> None:
    """Give the ended streams a moment to send their last chunk (at most ``wait_s``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while feed.readers and loop.time() < deadline:
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def open_console(
    settings: Settings,
    database_url: str,
    temporal: Callable[[], Awaitable[Client]],
    *,
    temporal_ui_url: str | None = None,
) -> AsyncIterator[str]:
    """The console on its own pool of `CONSOLE_POOL_SIZE` and a client that connects Temporal
    (``temporal``) only when a decision needs a wake; yields its URL until the block ends."""
    pool = await create_pool(database_url, max_size=CONSOLE_POOL_SIZE)
    try:
        client = ThreadwardenClient(pool, temporal, settings)
        async with serving(client, pool, settings, temporal_ui_url=temporal_ui_url) as url:
            yield url
    finally:
        await pool.close()
