"""The thread page's Stop button in a real headless browser: a running submission stops at its
next committed step, a waiting one at once; the page and the ledger both say ``aborted``."""

from __future__ import annotations

from playwright.async_api import Locator, Page, expect

from tests.console.browser import LiveConsole
from tests.console.helpers import submit_until
from threadwarden.client.client import ThreadwardenClient
from threadwarden.views import SubmissionView

STEPS = 400
SLOW = [{"say": f"part {n}"} if n % 2 == 0 else {"sleep_ms": 300} for n in range(STEPS)]
"""A scripted turn that would run for about a minute, committing a step every 300 ms: long enough
that a loaded machine cannot finish it before the page shows it running (the test takes only
until its next step after Stop)."""
SETTLES_MS = 30_000


async def _view(client: ThreadwardenClient, thread_id: str, submission_id: str) -> SubmissionView:
    status = await client.thread_status(thread_id)
    return next(s for s in status.submissions if s.submission_id == submission_id)


async def _stop(page: Page, row: Locator) -> None:
    stop = row.get_by_role("button", name="Stop")
    await expect(stop).to_have_count(1)
    await stop.click()
    await expect(page.locator(".error")).to_have_count(0)  # no refusal shown in its place


async def test_console_stop_button_aborts_a_running_submission_at_its_next_step(
    console: LiveConsole, client: ThreadwardenClient, ids: str
) -> None:
    running = await submit_until(client, ids, SLOW, "running")
    page = await console.live(f"/threads/{ids}")
    row = page.locator(f"#sub-{running.submission_id}")
    await expect(row).to_have_attribute("data-state", "running", timeout=SETTLES_MS)
    await expect(row).to_have_attribute("data-outcome", "")

    await _stop(page, row)
    await expect(row).to_have_attribute("data-outcome", "aborted", timeout=SETTLES_MS)
    await expect(row).to_have_attribute("data-state", "settled")
    await expect(row.get_by_role("button", name="Stop")).to_have_count(0)  # settled: no Stop

    view = await _view(client, ids, running.submission_id)
    assert (view.state, view.outcome) == ("settled", "aborted"), view
    said = [r["body"]["text"] for r in await client.records(ids) if r["kind"] == "message"]
    assert 1 <= len(said) < STEPS // 2, said  # it stopped before its end


async def test_console_stop_button_aborts_a_submission_waiting_for_approval_at_once(
    console: LiveConsole, client: ThreadwardenClient, ids: str
) -> None:
    asks = await submit_until(client, ids, [{"approval": "x"}], "suspended")
    page = await console.live(f"/threads/{ids}")
    row = page.locator(f"#sub-{asks.submission_id}")
    await expect(row).to_have_attribute("data-state", "suspended")

    await _stop(page, row)
    # At once: the page the button leads back to already shows it settled (expect's default
    # 5 s, not the 30 s a running one may take to reach its next step).
    await expect(row).to_have_attribute("data-outcome", "aborted")
    await expect(row.get_by_role("button", name="Stop")).to_have_count(0)
    view = await _view(client, ids, asks.submission_id)
    assert (view.state, view.outcome, view.waiting_for) == ("settled", "aborted", None), view
