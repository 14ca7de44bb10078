"""The chat page of docs/api.md "From a browser" (`examples/chat/index.html`), served from an
origin of its own and driven in chromium against a pydantic-ai agent on the scripted chat
server: live text, tool calls, the answer, an approval, the conversation again on reload, and
an error said on the page when the API cannot be reached."""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.async_api import Browser, Page, expect

from tests.console.conftest import ServeConsole
from tests.helpers.chat_server import chat_server
from tests.helpers.model_agents import PYDANTIC_AGENT, pydantic_ai_bindings
from tests.helpers.workers import Workers, with_bindings

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "examples" / "chat" / "index.html"
DOCS = ROOT / "docs" / "api.md"

LOOKUP = 'call lookup {"q": "<b>42</b>"}'
ANSWER = "final: order <b>42</b> shipped"
"""Markup in the message and the answer: the page shows it as text."""

WATCH_LIVE_TEXT = """() => {
  window.__live = [];
  const look = () => {
    for (const live of document.querySelectorAll("#chat .live")) {
      const previous = window.__live[window.__live.length - 1];
      if (previous?.text !== live.textContent) {
        const answered = document.querySelector(".answer") !== null;
        window.__live.push({ text: live.textContent, answered });
      }
    }
  };
  new MutationObserver(look).observe(document.querySelector("#chat"), {
    childList: true, subtree: true, characterData: true,
  });
}"""
"""Note every text the live line shows, and whether an answer was shown then (no sampling)."""


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on the test's output."""


@contextlib.contextmanager
def serving_files(folder: Path) -> Iterator[str]:
    """Serve ``folder``'s files on a free port of 127.0.0.1 until the block exits; yields the
    origin (a page's own, unlike the console's)."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def origin() -> Iterator[str]:
    """The chat page's folder served from an origin of its own (not the console's)."""
    with serving_files(PAGE.parent) as served:
        yield served


@pytest.fixture
async def api(serve_console: ServeConsole, origin: str) -> AsyncIterator[str]:
    """The API of a tokenless console that allows the page's origin."""
    async with serve_console(api_allowed_origins=[origin]) as console:
        yield f"{console}/v1"


@pytest.fixture
async def support(workers: Workers) -> AsyncIterator[None]:
    """A worker running the pydantic-ai support agent on the scripted chat server."""
    async with (
        chat_server() as server,
        workers.running(with_bindings(*pydantic_ai_bindings(server.url))),
    ):
        yield


def _address(origin: str, api: str, thread: str, **more: str) -> str:
    query = urlencode({"api": api, "agent": PYDANTIC_AGENT, "thread": thread, **more})
    return f"{origin}/index.html?{query}"


async def _say(page: Page, text: str) -> None:
    await page.locator("#text").fill(text)
    await page.locator("#text").press("Enter")


async def test_chat_page_streams_the_answer_shows_tools_and_approvals_and_reloads_the_turns(
    support: None, origin: str, api: str, browser: Browser, ids: str
) -> None:
    page = await browser.new_page()
    await page.goto(_address(origin, api, ids))
    await page.evaluate(WATCH_LIVE_TEXT)
    await _say(page, LOOKUP)

    turn = page.locator("#chat > li").first
    await expect(turn.locator(".step")).to_have_text(
        'calling lookup {"q":"<b>42</b>"}…', timeout=30_000
    )
    await expect(turn.locator(".answer")).to_have_text(ANSWER, timeout=30_000)
    await expect(turn.locator(".you")).to_have_text(LOOKUP)
    await expect(turn.locator(".live")).to_have_count(0)  # the answer replaced the live text
    seen: list[dict[str, Any]] = await page.evaluate("window.__live")
    texts = [s["text"] for s in seen if not s["answered"]]
    assert len(texts) >= 2, seen  # it grew before the answer was final
    assert all(ANSWER.startswith(t) for t in texts), texts
    assert all(len(a) < len(b) for a, b in zip(texts, texts[1:], strict=False)), texts

    await _say(page, 'call refund {"cents": 500}')
    refund = page.locator("#chat > li").nth(1)
    await expect(refund.locator(".wait")).to_contain_text(
        "tool refund wants to run", timeout=30_000
    )
    await refund.get_by_role("button", name="Approve").click()
    await expect(refund.locator(".answer")).to_have_text("final: refunded 500", timeout=30_000)
    await expect(refund.locator(".wait")).to_have_count(0)
    assert await page.locator("#chat b").count() == 0  # markup was shown as text

    await page.goto(_address(origin, api, ids, turns="1"))  # again, from GET /turns, a turn a page
    await expect(page.locator("#chat > li .answer")).to_have_text(["final: refunded 500"])
    await page.get_by_role("button", name="Older messages").click()
    await expect(page.locator("#chat > li .answer")).to_have_text(
        [ANSWER, "final: refunded 500"], timeout=30_000
    )
    await expect(page.locator("#chat > li .you")).to_have_text(
        [LOOKUP, 'call refund {"cents": 500}']
    )
    await expect(page.locator("#chat .step, #chat .wait")).to_have_count(0)
    await expect(page.locator("#older")).to_be_hidden()  # no turn is older
    assert await page.locator("#chat b").count() == 0
    await expect(page.locator("#error")).to_be_hidden()


async def test_chat_page_says_on_the_page_when_the_api_cannot_be_reached(
    serve_console: ServeConsole, origin: str, browser: Browser, ids: str
) -> None:
    page = await browser.new_page()
    error = page.locator("#error")
    await page.goto(_address(origin, "http://127.0.0.1:1/v1", ids))  # nothing listens there
    await expect(error).to_contain_text("no answer from http://127.0.0.1:1/v1")
    await expect(error).to_contain_text(f"THREADWARDEN_API_ALLOWED_ORIGINS allow {origin}")
    async with serve_console(api_allowed_origins=[origin]) as console:
        api = f"{console}/v1"
        other = origin.replace("127.0.0.1", "localhost")  # another origin: the API refuses it
        await page.goto(_address(other, api, ids))
        await expect(error).to_contain_text(f"THREADWARDEN_API_ALLOWED_ORIGINS allow {other}")
        await page.goto(_address(origin, api, ids))
        await expect(page.locator("body")).to_have_attribute("data-live", "open")
        await expect(error).to_be_hidden()
    # The console stopped: its event stream ended, and the page says it tries again.
    await expect(error).to_contain_text(f"following the conversation: no answer from {api}")


def test_chat_page_is_the_page_docs_api_md_shows() -> None:
    section = DOCS.read_text().split("## From a browser", 1)[1].split("\n## ", 1)[0]
    shown = re.search(r"```html\n(.*?)```", section, re.DOTALL)
    assert shown is not None, "docs/api.md 'From a browser' shows no html page"
    assert shown.group(1) == PAGE.read_text()
