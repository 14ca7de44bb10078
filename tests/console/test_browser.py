"""The console in a real headless browser: live updates without reloads, and screenshots."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import asyncpg
from playwright.async_api import Browser, expect

from tests.console.browser import LiveConsole, not_reloaded
from tests.console.conftest import ServeConsole
from tests.console.helpers import submit_until
from tests.helpers.cli import run_cli, unknown_side_effect
from threadwarden.client.client import ThreadwardenClient

TOKEN = "console-token-0123456789abcdef"
SHOTS = "CONSOLE_SCREENSHOTS"
"""A folder to write the four pages' screenshots to (``docs/images`` refreshes the docs');
unset: the test's own temporary folder."""


async def test_console_approve_in_the_inbox_settles_the_thread_page_without_reload(
    console: LiveConsole, client: ThreadwardenClient, ids: str
) -> None:
    asks = await submit_until(client, ids, [{"approval": "refund €5"}], "suspended")
    thread = await console.open(f"/threads/{ids}")
    row = thread.locator(f"#sub-{asks.submission_id}")
    await expect(row).to_have_attribute("data-state", "suspended")
    await expect(thread.locator("body")).to_have_attribute("data-live", "open")

    inbox = await console.open("/inbox")
    entry = inbox.locator(f"#wait-{asks.submission_id}")
    await expect(entry).to_contain_text("refund €5")
    await entry.get_by_role("button", name="Approve").click()
    await expect(entry).to_have_count(0, timeout=30_000)  # the inbox swapped in place
    await not_reloaded(inbox)

    await expect(row).to_have_attribute("data-outcome", "completed", timeout=30_000)
    await expect(thread.locator("#timeline")).to_contain_text("approval-decision")
    await not_reloaded(thread)


async def test_console_answer_form_in_the_inbox_refuses_in_place_then_resumes(
    console: LiveConsole, client: ThreadwardenClient, ids: str
) -> None:
    sizes = {"type": "string", "enum": ["S", "M", "L"]}
    ask = {"ask": {"question": "Which size?"}, "schema": sizes}
    asks = await submit_until(client, ids, [ask], "suspended")
    inbox = await console.open("/inbox")
    entry = inbox.locator(f"#wait-{asks.submission_id}")
    await expect(entry).to_contain_text("Question")
    await expect(entry).to_contain_text("Which size?")
    await entry.locator("textarea[name=value]").fill('"XL"')
    await entry.get_by_role("button", name="Answer").click()
    await expect(inbox.locator(".error")).to_contain_text("value: expected an answer valid")
    await expect(entry).to_have_count(1)  # refused: still waiting, nothing written

    entry = inbox.locator(f"#wait-{asks.submission_id}")
    await entry.locator("textarea[name=value]").fill('"L"')
    await entry.get_by_role("button", name="Answer").click()
    await expect(entry).to_have_count(0, timeout=30_000)
    await not_reloaded(inbox)
    outcome = await client.result(asks.submission_id, timeout=30)
    assert outcome.result == {"said": [], "answers": ["L"]}


async def test_console_thread_page_shows_a_cli_submission_live(
    console: LiveConsole, cli_env: None, client: ThreadwardenClient, ids: str
) -> None:
    await submit_until(client, ids, [{"say": "already here"}], "completed")
    page = await console.live(f"/threads/{ids}")
    shown = await page.locator("#timeline > li").count()

    code = await run_cli(
        "submit", ids, "--agent", "scripted", "--input", '[{"say": "typed in a shell"}]'
    )
    assert code == 0
    await expect(page.locator("#timeline")).to_contain_text("typed in a shell", timeout=30_000)
    assert await page.locator("#timeline > li").count() > shown
    await expect(page.locator("#submissions tbody tr")).to_have_count(2)
    await not_reloaded(page)


async def test_console_screenshots_of_the_four_pages(
    console: LiveConsole,
    pool: asyncpg.Pool[Any],
    client: ThreadwardenClient,
    ids: str,
    tmp_path: Path,
) -> None:
    folder = Path(os.environ.get(SHOTS) or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"support-{ids[1:5]}"
    done = [{"say": "Your order ships tomorrow."}, {"tool": "lookup"}]
    await submit_until(client, name, done, "completed")
    asks = [{"say": "Refund?"}, {"approval": "refund order 1042"}]
    await submit_until(client, name, asks, "suspended")
    await unknown_side_effect(pool, f"billing-{ids[1:5]}")
    await client.submit(f"triage-{ids[1:5]}", agent_id="scripted", input=[{"say": "triaged"}])

    pages = {
        "threads": "/",
        "thread": f"/threads/{name}",
        "inbox": "/inbox",
        "host": f"/hosts/{name}",
    }
    for shot, path in pages.items():
        page = await console.open(path)
        await expect(page.locator("h1")).to_be_visible()
        target = folder / f"console-{shot}.png"
        await page.screenshot(path=str(target), full_page=False)
        assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        await page.close()


async def test_console_forms_in_the_browser_admit_and_show_refusals_in_place(
    console: LiveConsole, client: ThreadwardenClient, ids: str
) -> None:
    await submit_until(client, ids, [{"say": "start"}], "completed")
    page = await console.open(f"/threads/{ids}")
    form = page.locator("form.submit")
    await form.locator("textarea[name=input]").fill('[{"nope": 1}]')
    await form.get_by_role("button", name="Submit").click()
    await expect(page.locator(".error")).to_contain_text("input[0]: expected one of say")
    await expect(page.locator("form.submit textarea[name=input]")).to_have_value('[{"nope": 1}]')

    await page.locator("form.submit textarea[name=input]").fill('[{"say": "from the form"}]')
    await page.locator("form.submit").get_by_role("button", name="Submit").click()
    await expect(page.locator("#submissions tbody tr")).to_have_count(2, timeout=30_000)
    await expect(page.locator("#timeline")).to_contain_text("from the form", timeout=30_000)
    await not_reloaded(page)


async def test_console_login_form_lets_the_token_holder_in(
    serve_console: ServeConsole, browser: Browser
) -> None:
    async with serve_console(console_token=TOKEN, console_token_name="alice") as url:
        page = await browser.new_page()
        await page.goto(f"{url}/inbox")
        await expect(page).to_have_url(f"{url}/login?next=/inbox")
        await page.get_by_label("Console token").fill("not the token, not at all")
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.locator(".error")).to_contain_text("not the console's")
        await page.get_by_label("Console token").fill(TOKEN)
        await page.get_by_role("button", name="Sign in").click()
        await expect(page).to_have_url(f"{url}/inbox")
        await expect(page.get_by_role("button", name="Sign out (alice)")).to_be_visible()
        await page.get_by_role("button", name="Sign out (alice)").click()
        await expect(page).to_have_url(f"{url}/login")
        await page.goto(f"{url}/")
        await expect(page).to_have_url(f"{url}/login?next=/")
