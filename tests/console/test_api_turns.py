"""A thread's conversation on page load: ``GET /v1/threads/{id}/turns`` pages its turns newest
first with each one's input, state and result, ``GET /v1/submissions/{id}`` carries the input,
and `ThreadwardenClient.turns` reads the same pages. (That a page reads its own rows, not the
thread, is tests/ledger/test_long_thread_plans.py's.)"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.console.api import error_of, post, settled, state_of
from threadwarden.client.client import ThreadwardenClient
from threadwarden.errors import InvalidInput

SETTLED = 25
RUNNING = [{"say": "thinking"}, *({"sleep_ms": 250} for _ in range(80))]
"""A turn still running while the pages are read (about 20 s; aborted at the end)."""


async def _pages(http: httpx.AsyncClient, thread_id: str, limit: int) -> list[dict[str, Any]]:
    """Every page of the thread's turns, following ``next_before`` to the end."""
    pages: list[dict[str, Any]] = []
    params: dict[str, int] = {"limit": limit}
    while True:
        answer = await http.get(f"/v1/threads/{thread_id}/turns", params=params)
        assert answer.status_code == 200, answer.text
        pages.append(answer.json())
        if pages[-1]["next_before"] is None:
            return pages
        assert len(pages) <= SETTLED, "next_before never ends"
        params["before"] = pages[-1]["next_before"]


async def test_turns_page_a_conversation_newest_first_each_turn_once(
    worker: None, http: httpx.AsyncClient, client: ThreadwardenClient, ids: str
) -> None:
    inputs = [[{"say": f"message {n}"}] for n in range(1, SETTLED + 1)]
    receipts = [await client.submit(ids, agent_id="scripted", input=i) for i in inputs]
    await settled(http, receipts[-1].submission_id)  # FIFO: every earlier one settled first
    running = await client.submit(ids, agent_id="scripted", input=RUNNING)
    await state_of(http, running.submission_id, "running")

    pages = await _pages(http, ids, limit=10)

    assert [len(p["turns"]) for p in pages] == [10, 10, 6]
    assert [p["next_before"] for p in pages] == [17, 7, None]
    turns = [turn for page in pages for turn in page["turns"]]
    assert [t["sequence"] for t in turns] == list(range(SETTLED + 1, 0, -1))
    newest, *done = turns
    assert newest == newest | {
        "submission_id": running.submission_id,
        "agent": "scripted",
        "input": RUNNING,
        "state": "running",
        "outcome": None,
        "result": None,
        "waiting_for": None,
    }
    for turn, receipt, sent in zip(reversed(done), receipts, inputs, strict=True):
        assert turn["submission_id"] == receipt.submission_id
        assert (turn["input"], turn["state"], turn["outcome"]) == (sent, "settled", "completed")
        assert turn["result"] == {"said": [sent[0]["say"]]}

    default = await http.get(f"/v1/threads/{ids}/turns")
    assert [t["sequence"] for t in default.json()["turns"]] == list(range(26, 6, -1))
    page = await client.turns(ids, limit=10, before=17)
    assert page.model_dump(mode="json") == pages[1]
    await client.abort(running.submission_id)


async def test_a_submission_carries_its_input_and_turns_the_last_record_to_follow_after(
    worker: None, http: httpx.AsyncClient, client: ThreadwardenClient, ids: str
) -> None:
    sent = [{"say": "hello"}]
    receipt = await post(
        http, f"/v1/threads/{ids}/submissions", {"agent": "scripted", "input": sent}
    )
    done = await settled(http, receipt.json()["submission_id"])
    assert (done["input"], done["result"]) == (sent, {"said": ["hello"]})
    now = await http.get(f"/v1/submissions/{receipt.json()['submission_id']}")
    assert now.json()["input"] == sent

    page = (await http.get(f"/v1/threads/{ids}/turns")).json()
    records = await client.records(ids)
    assert page["last_record"] == records[-1]["sequence"] == 2  # its message, its settlement


async def test_turns_refuse_bad_parameters_naming_them_and_an_unknown_thread(
    http: httpx.AsyncClient, client: ThreadwardenClient, ids: str
) -> None:
    await client.submit(ids, agent_id="scripted", input=[{"say": "x"}])  # no worker: it waits
    path = f"/v1/threads/{ids}/turns"
    for params, field, expected in [
        ({"limit": "0"}, "limit", "limit: expected an integer from 1 to 100, got 0"),
        ({"limit": "101"}, "limit", "limit: expected an integer from 1 to 100, got 101"),
        ({"limit": "ten"}, "limit", "limit: expected an integer from 1 to 100, got 'ten'"),
        ({"before": "0"}, "before", "before: expected a turn's sequence"),
        ({"before": "-3"}, "before", "before: expected a turn's sequence"),
        ({"before": "9" * 19}, "before", "before: expected a turn's sequence"),
    ]:
        answer = await http.get(path, params=params)
        error = error_of(answer)
        assert (answer.status_code, error["code"], error["field"]) == (400, "invalid_input", field)
        assert error["message"].startswith(expected), error

    # Unknown: 404 naming the path's parameter, as for the other reads (docs/api.md).
    for path, field in [
        ("/v1/threads/no-such-thread/turns", "thread_id"),
        ("/v1/threads/no-such-thread", "thread_id"),
        ("/v1/submissions/sub_none", "submission_id"),
        ("/v1/submissions/sub_none/result", "submission_id"),
    ]:
        unknown = await http.get(path)
        assert unknown.status_code == 404
        assert error_of(unknown) | {"code": "not_found", "field": field} == error_of(unknown)

    for limit, before in [(0, None), (True, None), (10, 0)]:
        with pytest.raises(InvalidInput):
            await client.turns(ids, limit=limit, before=before)
    [only] = (await client.turns(ids)).turns
    assert (only.outcome, only.input, only.result) == (None, [{"say": "x"}], None)
