"""Debian's chromium driven by Playwright (its own browser download is unreachable here)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from playwright.async_api import Browser, async_playwright

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
"""Without the network flags chromium hangs on lookups in a closed network."""


def chromium_path() -> str:
    """The chromium executable; a missing one fails the test in one line (CI installs it)."""
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "no Chromium found (looked for chromium, chromium-browser, google-chrome on PATH):"
        " apt-get install -y chromium",
        pytrace=False,
    )


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless chromium for one test."""
    path = chromium_path()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=path, headless=True, args=FLAGS)
        try:
            yield browser
        finally:
            await browser.close()
