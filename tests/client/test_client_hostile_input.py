"""Hostile values on every input path of the client: SQL metacharacters, NUL bytes, 10 MB
strings, 100k-level nesting, non-UTF-8 text, non-finite and huge numbers. Each is refused with
`InvalidInput` naming the field, in one line, and nothing is written; free text is stored
verbatim. The CLI's twin is tests/cli/test_cli_hostile_input.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from tests.helpers.hostile import ESCAPE, HUGE, NON_UTF8, NUL, SQL, nested, row_counts
from threadwarden.client.client import ThreadwardenClient
from threadwarden.errors import InvalidInput

DEEP = nested(100_000)
HOSTILE_IDS = [SQL, NUL, HUGE, NON_UTF8, "", ESCAPE]
HOSTILE_INPUTS = [
    DEEP,
    {"text": NUL},
    {NUL: 1},
    {"text": NON_UTF8},
    HUGE,
    10**5000,
    float("inf"),
    float("nan"),
    {1: "non-string key"},
    {"not json": object()},
]


Call = Callable[[ThreadwardenClient, str, Any], Awaitable[object]]
"""A client call given the client, a real queued submission id and the hostile value."""


def _api_cases() -> list[tuple[str, str, Call, Any]]:
    cases: list[tuple[str, str, Call, Any]] = []

    def add(name: str, field: str, call: Call, values: list[Any]) -> None:
        cases.extend((f"{name}-{i}", field, call, value) for i, value in enumerate(values))

    ids = HOSTILE_IDS
    add("submit-thread", "thread", lambda c, s, v: c.submit(v, agent_id="a", input=1), ids)
    add("submit-agent", "agent", lambda c, s, v: c.submit("t", agent_id=v, input=1), ids)
    add("submit-host", "host", lambda c, s, v: c.submit("t", agent_id="a", input=1, host_id=v), ids)
    add(
        "submit-key",
        "idempotency_key",
        lambda c, s, v: c.submit("t", agent_id="a", input=1, idempotency_key=v),
        ids,
    )
    add(
        "submit-digest",
        "agent_digest",
        lambda c, s, v: c.submit("t", agent_id="a", input=1, agent_digest=v),
        ids,
    )
    add("approve", "submission", lambda c, s, v: c.approve(v), ids)
    add("deny", "submission", lambda c, s, v: c.deny(v), ids)
    add("abort", "submission", lambda c, s, v: c.abort(v), ids)
    add("resolve", "submission", lambda c, s, v: c.resolve(v, "not-run"), ids)
    add("submission", "submission", lambda c, s, v: c.submission(v), ids)
    add("thread-status", "thread", lambda c, s, v: c.thread_status(v), ids)
    add("thread-summary", "thread", lambda c, s, v: c.thread_summary(v), ids)
    add("messages-sent", "thread", lambda c, s, v: c.messages_sent(v), ids)
    add("records", "thread", lambda c, s, v: c.records(v), ids)
    add("host-status", "host", lambda c, s, v: c.host_status(v), ids)
    add("rebuild", "host", lambda c, s, v: c.rebuild_projection(v), ids)
    add("wake", "host", lambda c, s, v: c.wake(v), ids)
    inputs = HOSTILE_INPUTS
    add("submit-input", "input", lambda c, s, v: c.submit("t", agent_id="a", input=v), inputs)
    add("resolve-result", "result", lambda c, s, v: c.resolve(s, "ran", v), inputs)
    reasons = [NUL, HUGE, NON_UTF8, ESCAPE, "two\nlines", 42]
    add("deny-reason", "reason", lambda c, s, v: c.deny(s, v), reasons)
    add("resolve-outcome", "outcome", lambda c, s, v: c.resolve(s, v), [SQL, None])
    add("resolve-unasked", "result", lambda c, s, v: c.resolve(s, "fail", v), [{"x": 1}])
    add(
        "scripted-sleep",
        "sleep_ms",
        lambda c, s, v: c.submit("t", agent_id="scripted", input=[{"sleep_ms": v}]),
        [-1, 10**30, 1e400, "1000"],
    )
    return cases


API_CASES = _api_cases()


@pytest.fixture
async def waiting(client: ThreadwardenClient, ids: str) -> str:
    """A real submission (no worker runs, so it stays queued) for the operator calls to name."""
    receipt = await client.submit(ids, agent_id="scripted", input=[{"say": "hi"}])
    return receipt.submission_id


async def test_client_refuses_every_hostile_value_by_field_and_writes_nothing(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], waiting: str
) -> None:
    before = await row_counts(pool)
    unrefused = []
    for name, field, call, value in API_CASES:
        try:
            await call(client, waiting, value)
        except InvalidInput as error:
            if field not in error.field or "\n" in str(error):
                unrefused.append(f"{name}: {error}")
        else:
            unrefused.append(f"{name}: accepted")
    assert unrefused == []
    assert await row_counts(pool) == before


async def test_client_stores_sql_metacharacters_in_free_text_verbatim(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    # Free text is data, not an error: parameters keep it out of the SQL.
    script = [{"say": SQL}, {"tool": SQL, "args": {SQL: SQL}}]
    receipt = await client.submit(ids, agent_id="scripted", input=script, idempotency_key="k")
    stored = await pool.fetchval(
        "SELECT input FROM threadwarden.submissions WHERE submission_id = $1",
        receipt.submission_id,
    )
    assert stored == script
    assert (await row_counts(pool))["submissions"] == 1
