"""Fixtures of the console tests: the console served by uvicorn on a free loopback port."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import asyncpg
import httpx
import pytest
from playwright.async_api import Browser

from tests.console.browser import LiveConsole, chromium
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.settings import Settings
from threadwarden.console.server import serving

ServeConsole = Callable[..., AbstractAsyncContextManager[str]]


def serve(
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    settings: Settings,
    temporal_ui_url: str | None = None,
    **changes: Any,
) -> AbstractAsyncContextManager[str]:
    """Serve a console on ``pool``'s ledger with ``settings`` changed by keyword (validated as
    the environment's would be; address ``127.0.0.1:0`` unless given); use as
    ``async with serve(…) as url``."""
    fields = {"console_address": "127.0.0.1:0", **changes}
    explicit = {name: getattr(settings, name) for name in settings.model_fields_set}
    changed = Settings.model_validate({**explicit, **fields})
    return serving(client, pool, changed, temporal_ui_url=temporal_ui_url)


@pytest.fixture
def serve_console(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], settings: Settings
) -> ServeConsole:
    """`serve` on the test's ledger and settings: ``async with serve_console(**changes) as
    url`` (an optional ``temporal_ui_url`` too)."""
    return functools.partial(serve, client, pool, settings)


@pytest.fixture
async def console_url(serve_console: ServeConsole) -> AsyncIterator[str]:
    """A console without a token on loopback (everyone is ``local``)."""
    async with serve_console() as url:
        yield url


@pytest.fixture
async def http(console_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on the tokenless console (redirects not followed)."""
    async with httpx.AsyncClient(base_url=console_url, timeout=30) as session:
        yield session


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """A headless chromium (without one: skipped naming the fix, or failed under CI=true)."""
    async with chromium() as launched:
        yield launched


@pytest.fixture
def console(worker: None, console_url: str, browser: Browser) -> LiveConsole:
    """A running worker and a tokenless console, with a headless browser to open its pages."""
    return LiveConsole(console_url, browser)
