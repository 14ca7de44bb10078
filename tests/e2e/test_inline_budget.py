"""An inline head moves at a committed boundary only (issue 39): past its budget the attempt
yields at its next committed step, before a step declared too long for what is left of the
budget it yields at the boundary before it, and no step in flight is cut off by the budget, so
no step runs twice. Counted from the journal (each step's records once, the epoch of the
attempt that wrote them), the attempts, the binding's own runs and the readers' deltas."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import asyncpg
import pytest

from tests.helpers.checks import assert_settled_once, submission_rows
from tests.helpers.feed import streamed_until_settled
from tests.helpers.workers import Workers, with_bindings
from threadwarden.bindings import AttemptContext, Binding, Completed, Outcome
from threadwarden.client.client import ThreadwardenClient
from threadwarden.reading.text import TextDelta

SHORT_STEPS = 30
"""Tool steps of 100 ms each, declaring nothing: about 3 s, six times the budget below."""


def _undeclared(agent_id: str, runs: Counter[int], durations: list[float]) -> Binding:
    """An inline binding of tool steps that each stream a word and take its duration in
    seconds without declaring it; ``runs`` counts each step's runs."""

    async def handle(context: AttemptContext) -> Outcome:
        async def run(args: dict[str, Any]) -> int:
            runs[args["n"]] += 1
            context.text_delta(f"word{args['n']} ")
            await asyncio.sleep(durations[args["n"]])
            return int(args["n"])

        for n in range(len(durations)):
            await context.tool("short", {"n": n}, run)
        return Completed(len(durations))

    return Binding(
        agent_id=agent_id,
        digest=f"{agent_id}-v1",
        handler=handle,
        history_kinds=frozenset(),
        inline=True,
    )


async def _followed(client: ThreadwardenClient, thread: str) -> asyncio.Task[list[Any]]:
    """What a reader of the thread sees until the first settlement, from before it exists."""
    return asyncio.create_task(streamed_until_settled(client, thread, wait_for_thread=True))


def _restarts(seen: list[Any]) -> list[TextDelta]:
    return [item for item in seen if isinstance(item, TextDelta) and item.restart]


def _epochs_by_step(records: list[dict[str, Any]]) -> dict[int, set[int]]:
    """The epochs (attempts) that wrote each `_undeclared` step's call and result."""
    steps: dict[int, set[int]] = {}
    for record in records:
        body = record["body"]
        if record["kind"] in ("tool-call", "tool-result"):
            n = body["args"]["n"] if record["kind"] == "tool-call" else body["result"]
            steps.setdefault(n, set()).add(record["epoch"])
    return steps


async def test_many_short_steps_yield_at_a_committed_step_and_none_runs_twice(
    workers: Workers,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    ids: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    runs: Counter[int] = Counter()
    binding = _undeclared("short-steps", runs, [0.1] * SHORT_STEPS)
    async with workers.tuned(inline_budget_ms=500).running(with_bindings(binding)):
        following = await _followed(client, ids)
        await client.submit(ids, agent_id="short-steps", input="go")
        await assert_settled_once(client, ids, 1)
        seen = await asyncio.wait_for(following, 60)

    assert runs == Counter(range(SHORT_STEPS))  # every step ran once: none was cut off
    records = await client.records(ids)
    calls = [r["body"]["args"]["n"] for r in records if r["kind"] == "tool-call"]
    results = [r["body"]["result"] for r in records if r["kind"] == "tool-result"]
    assert calls == results == list(range(SHORT_STEPS))  # each step's records once
    # The inline attempt yielded after a committed step; the dispatched one went on at the
    # next step: two attempts, and no step written by both.
    [row] = await submission_rows(pool, ids)
    assert row["attempts"] == 2
    steps = _epochs_by_step(records)
    assert all(len(epochs) == 1 for epochs in steps.values()), steps
    first, _ = sorted(set().union(*steps.values()))
    inline = [n for n, epochs in sorted(steps.items()) if epochs == {first}]
    assert 0 < len(inline) < SHORT_STEPS and inline == list(range(len(inline)))
    assert not _restarts(seen)  # no reader saw a step start over
    deltas = [item for item in seen if isinstance(item, TextDelta)]
    assert "".join(d.text for d in deltas) == "".join(f"word{n} " for n in range(SHORT_STEPS))
    assert not [r for r in caplog.records if "past its inline budget" in r.getMessage()]


@pytest.mark.parametrize(
    "long_step",
    [
        {"stream": " ".join(f"word{n}" for n in range(10)), "chunk_ms": 100},
        {"sleep_ms": 900},
    ],
    ids=["stream", "sleep"],
)
async def test_a_step_declared_longer_than_the_budget_left_never_starts_inline(
    workers: Workers,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    ids: str,
    long_step: dict[str, Any],
) -> None:
    """The scripted ``stream`` and ``sleep_ms`` steps declare their length (900 ms here, the
    budget 300 ms): the inline attempt commits the first message, then yields before the long
    step; the dispatched attempt runs it, once, and the rest of the script."""
    script = [{"say": "first"}, long_step, {"say": "last"}]
    async with workers.tuned(inline_budget_ms=300).running():
        following = await _followed(client, ids)
        await client.submit(ids, agent_id="scripted", input=script)
        await assert_settled_once(client, ids, 1)
        seen = await asyncio.wait_for(following, 60)

    [row] = await submission_rows(pool, ids)
    assert row["attempts"] == 2
    records = await client.records(ids)
    said = {r["body"]["text"]: r["epoch"] for r in records if r["kind"] == "message"}
    assert said["first"] < said["last"]  # the inline attempt's, then the dispatched one's
    tools = [(r["kind"], r["epoch"]) for r in records if r["kind"].startswith("tool-")]
    if "stream" in long_step:  # journaled once, wholly by the dispatched attempt
        epoch = said["last"]
        assert tools == [("tool-call", epoch), ("tool-result", epoch)]
        deltas = [item for item in seen if isinstance(item, TextDelta)]
        assert "".join(d.text for d in deltas) == long_step["stream"]
        assert not _restarts(seen)
    else:
        assert tools == []  # a sleep commits nothing: the messages around it show the move


async def test_an_undeclared_step_past_the_budget_finishes_and_is_named(
    workers: Workers,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    ids: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A step that declared nothing and runs more than 1 s past the budget is not cut off:
    it finishes, the attempt yields at the boundary after it, and a warning names it."""
    caplog.set_level(logging.WARNING)
    runs: Counter[int] = Counter()
    binding = _undeclared("undeclared", runs, [1.3, 0])
    async with workers.tuned(inline_budget_ms=100).running(with_bindings(binding)):
        await client.submit(ids, agent_id="undeclared", input="go")
        await assert_settled_once(client, ids, 1)

    assert runs == Counter({0: 1, 1: 1})
    [row] = await submission_rows(pool, ids)
    assert row["attempts"] == 2  # it yielded after the first step, the second was dispatched
    warnings = [
        r.getMessage() for r in caplog.records if "past its inline budget" in r.getMessage()
    ]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("step 1 (tool-result of tool 'short') of agent undeclared ran")
    assert "expected_ms" in warnings[0]
