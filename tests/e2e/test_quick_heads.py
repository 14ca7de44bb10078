"""A quick agent's heads run inline (issue 39, `threadwarden.activities.quick_heads`): a binding
not declared inline is dispatched until its last 8 attempts on the worker were quick, then runs
on the pass's worker; one attempt with a step longer than ``inline_quick_ms`` sends its heads
back to the agent's queue. Where each attempt ran is what the binding saw
(`temporalio.activity.info().is_local`)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity

from tests.helpers.checks import assert_settled_once
from tests.helpers.workers import Workers, with_bindings
from threadwarden.activities.quick_heads import WINDOW
from threadwarden.bindings import AttemptContext, Binding, Completed, Outcome
from threadwarden.client.client import ThreadwardenClient

QUICK_MS = 150
"""The worker's ``inline_quick_ms`` here."""


def _tool_turns(agent_id: str, local: list[bool]) -> Binding:
    """Not declared inline: each turn one tool step that sleeps ``input["ms"]``; ``local``
    gets, per turn, whether its attempt ran inline."""

    async def handle(context: AttemptContext) -> Outcome:
        local.append(activity.info().is_local)

        async def run(args: dict[str, Any]) -> int:
            await asyncio.sleep(args["ms"] / 1000)
            return int(args["ms"])

        return Completed(await context.tool("wait", {"ms": context.input["ms"]}, run))

    return Binding(
        agent_id=agent_id, digest=f"{agent_id}-v1", handler=handle, history_kinds=frozenset()
    )


async def test_an_agent_quick_on_its_worker_runs_inline_until_a_step_is_slow(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    local: list[bool] = []
    binding = _tool_turns("quick-tools", local)
    # WINDOW + 2 quick turns, one whose step outlasts QUICK_MS, then a quick one again.
    waits = [0] * (WINDOW + 2) + [2 * QUICK_MS, 0]
    async with workers.tuned(inline_quick_ms=QUICK_MS).running(with_bindings(binding)):
        for ms in waits:
            await client.submit(ids, agent_id="quick-tools", input={"ms": ms})
        await assert_settled_once(client, ids, len(waits))

    assert local == [False] * WINDOW + [True] * 3 + [False]
