"""The console's thread page shows a reply growing (issue 31): the live timeline's ``event:
delta`` grows a live element at the end of the timeline, shown as text (never HTML), which the
step's journaled ``tool-result`` record replaces."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from tests.console.api import events
from tests.console.browser import LiveConsole, not_reloaded
from tests.console.helpers import submit_until
from tests.helpers.feed import ANSWER_INLINE_BUDGET_MS, stopped_mid_answer, without_inline_heads
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.settings import Settings

WORDS = [f"word{n}" for n in range(40)]
WORDS[7] = "<b>bold</b>"  # shown as text: the page never parses live text as HTML
ANSWER = " ".join(WORDS)
STREAM = [{"stream": ANSWER, "chunk_ms": 100}]
"""40 words, one every 100 ms: about 4 s of live text."""

WATCH_LIVE_TEXT = """() => {
  window.__live = [];
  const timeline = document.getElementById("timeline");
  const look = () => {
    for (const item of timeline.querySelectorAll(":scope > li.live")) {
      const seen = {
        step: item.dataset.step,
        text: item.querySelector("pre").textContent,
        last: item === timeline.lastElementChild,
        html: item.querySelector("pre").children.length,
      };
      const previous = window.__live[window.__live.length - 1];
      if (!previous || previous.text !== seen.text) window.__live.push(seen);
    }
  };
  new MutationObserver(look).observe(timeline, {
    childList: true, subtree: true, characterData: true,
  });
}"""
"""Note every text the live element shows (a MutationObserver: no sampling, no sleep)."""

LIVE_TEXT = "#timeline > li.live pre"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """No inline heads: every attempt is dispatched (a restart needs a deploy mid-reply, as
    `test_console_thread_page_starts_a_cut_off_reply_over` sets up)."""
    return without_inline_heads(settings)


async def _thread_page(console: LiveConsole, client: ThreadwardenClient, thread_id: str) -> Page:
    """The thread's page, live and watching its live text, once the thread exists (a first
    quick submission)."""
    await submit_until(client, thread_id, [{"say": "hello"}], "completed")
    page = await console.live(f"/threads/{thread_id}")
    await page.evaluate(WATCH_LIVE_TEXT)
    return page


async def _live_text_at_least(page: Page, chars: int) -> str:
    """The live element's text once it is at least ``chars`` long (a deadline, no sleep)."""
    await page.wait_for_function(
        """([selector, chars]) => {
          const text = document.querySelector(selector);
          return text !== null && text.textContent.length >= chars;
        }""",
        arg=[LIVE_TEXT, chars],
        timeout=30_000,
    )
    return await page.locator(LIVE_TEXT).text_content() or ""


async def test_console_thread_page_shows_the_reply_growing_then_its_journaled_record(
    console: LiveConsole, client: ThreadwardenClient, ids: str
) -> None:
    page = await _thread_page(console, client, ids)
    streamed = await client.submit(ids, agent_id="scripted", input=STREAM)
    live = page.locator("#timeline > li.live")

    early = await _live_text_at_least(page, 1)
    assert ANSWER.startswith(early) and len(early) < len(ANSWER) // 2, early
    await expect(live).to_have_attribute("data-submission", streamed.submission_id)
    later = await _live_text_at_least(page, len(ANSWER) // 2)
    assert ANSWER.startswith(later) and len(later) > len(early), (early, later)
    assert await page.locator(f"{LIVE_TEXT} b").count() == 0  # "<b>bold</b>" is text

    await expect(live).to_have_count(0, timeout=30_000)  # replaced by the journaled record
    result = page.locator(
        f"#timeline > li.kind-tool-result[data-submission='{streamed.submission_id}']"
    )
    await expect(result).to_have_count(1)
    await expect(result.locator("pre")).to_contain_text(json.dumps(ANSWER))
    await expect(page.locator("#timeline > li.kind-settlement").last).to_have_attribute(
        "data-submission", streamed.submission_id, timeout=30_000
    )
    assert await page.locator("#timeline b").count() == 0

    seen: list[dict[str, Any]] = await page.evaluate("window.__live")
    texts = [s["text"] for s in seen]
    assert len(texts) >= 10, texts  # it grew in many steps, each a longer prefix of the answer
    assert all(ANSWER.startswith(t) for t in texts), texts
    assert all(len(a) < len(b) for a, b in zip(texts, texts[1:], strict=False)), texts
    assert texts[-1] == ANSWER  # the last words before the record
    assert all(s["last"] and s["html"] == 0 for s in seen)  # at the end, text only
    assert {s["step"] for s in seen} == {await result.get_attribute("data-step")}
    await not_reloaded(page)


async def test_console_thread_page_starts_a_cut_off_reply_over(
    console_url: str,
    browser: Browser,
    workers: Workers,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    """A deploy stops the worker streaming the reply inline; the next worker's attempt starts
    it over, and the page's live text starts over with it."""
    deployed = workers.tuned(inline_budget_ms=ANSWER_INLINE_BUDGET_MS)
    async with deployed.running() as first:
        page = await _thread_page(LiveConsole(console_url, browser), client, ids)
        streamed = await client.submit(ids, agent_id="scripted", input=STREAM)
        await stopped_mid_answer(first, pool, ids)
    async with deployed.running():
        await expect(page.locator("#timeline > li.kind-settlement").last).to_have_attribute(
            "data-submission", streamed.submission_id, timeout=60_000
        )
    await expect(page.locator("#timeline > li.live")).to_have_count(0)
    results = page.locator("#timeline > li.kind-tool-result")
    await expect(results).to_have_count(1)  # one journaled response
    await expect(results.locator("pre")).to_contain_text(json.dumps(ANSWER))

    texts = [s["text"] for s in await page.evaluate("window.__live")]
    assert all(ANSWER.startswith(t) for t in texts), texts
    restarts = [n for n in range(1, len(texts)) if len(texts[n]) <= len(texts[n - 1])]
    assert restarts, texts  # the re-run's text replaced the cut-off attempt's, not appended
    again = texts[restarts[-1] :]
    assert all(len(a) < len(b) for a, b in zip(again, again[1:], strict=False)), texts
    assert again[-1] == ANSWER


def _settlement(event: dict[str, str]) -> bool:
    return event["event"] == "record" and "kind-settlement" in event["data"]


async def test_console_events_interleave_deltas_as_json_and_mark_the_step_of_its_record(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    text = "<script>alert(1)</script> & a few words\nover two lines"
    async with http.stream("GET", f"/threads/{ids}/events", params={"after": 0}) as stream:
        streamed = await client.submit(
            ids, agent_id="scripted", input=[{"stream": text, "chunk_ms": 50}]
        )
        got = await asyncio.wait_for(events(stream.aiter_lines(), until=_settlement), timeout=60)
    deltas = [json.loads(e["data"]) for e in got if e["event"] == "delta"]
    assert deltas and "".join(d["text"] for d in deltas) == text
    assert all("id" not in e for e in got if e["event"] == "delta")
    assert {(d["submission_id"], d["restart"]) for d in deltas} == {(streamed.submission_id, False)}
    [result] = [e["data"] for e in got if "kind-tool-result" in e["data"]]
    assert f'data-submission="{streamed.submission_id}"' in result
    assert f'data-step="{deltas[0]["step"]}"' in result
    assert "<script>" not in result  # the record's HTML is escaped as before
