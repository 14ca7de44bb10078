"""The browser the console's tests drive: Playwright's own chromium when it was installed
(``python -m playwright install chromium``), else a chromium or chrome on ``PATH`` (Debian's
``apt-get install chromium``). Without either, each browser test is skipped naming the fix; under
``CI=true`` it fails instead, since CI must run them. `LiveConsole` opens a console's pages in
it."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
"""Without the network flags chromium hangs on lookups in a closed network."""
MISSING = "no chromium: apt-get install chromium, or python -m playwright install chromium"


def find_browser(playwright_own: str | None) -> str | None:
    """The executable to launch: Playwright's own download (``playwright_own``, when it exists),
    else the first candidate on ``PATH``; None when there is neither."""
    if playwright_own and Path(playwright_own).is_file():
        return playwright_own
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def in_ci() -> bool:
    """Whether the run is CI's (``CI`` set to true, as CI services and ``.ci/run`` do)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def no_browser() -> NoReturn:
    """Skip the test naming the fix, or fail it under CI (which must run the browser tests)."""
    if in_ci():
        pytest.fail(f"{MISSING} (CI=true: the browser tests must run)", pytrace=False)
    pytest.skip(MISSING)


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless chromium for one test."""
    async with async_playwright() as playwright:
        path = find_browser(playwright.chromium.executable_path)
        if path is None:
            no_browser()
        browser = await playwright.chromium.launch(executable_path=path, headless=True, args=FLAGS)
        try:
            yield browser
        finally:
            await browser.close()


@dataclass
class LiveConsole:
    """A console served beside a running worker, and the browser that opens its pages."""

    url: str
    browser: Browser

    async def open(self, path: str) -> Page:
        """The page at ``path`` (1280×800), marked so that `not_reloaded` can tell whether it
        ever reloaded."""
        page = await self.browser.new_page(viewport={"width": 1280, "height": 800})
        await page.goto(f"{self.url}{path}")
        await page.evaluate("window.__notReloaded = true")  # gone if the page ever reloads
        return page

    async def live(self, path: str) -> Page:
        """The page at ``path`` once its live updates (the thread's event stream) are open."""
        page = await self.open(path)
        await expect(page.locator("body")).to_have_attribute("data-live", "open")
        return page


async def not_reloaded(page: Page) -> None:
    """The page a `LiveConsole` opened has updated in place: it never reloaded."""
    assert await page.evaluate("window.__notReloaded === true")
