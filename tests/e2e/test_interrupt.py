"""``if_busy="interrupt"`` against a side effect in flight: the call that ran keeps its
recorded result, the interrupted submission aborts at its next boundary, the new one runs."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.helpers.checks import assert_settled_once
from tests.helpers.workers import Workers, with_bindings
from threadwarden import AttemptContext, Binding, Completed, Outcome
from threadwarden.client.client import ThreadwardenClient


async def test_interrupt_while_a_side_effect_runs_keeps_its_result_then_aborts(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    charging, charged = asyncio.Event(), asyncio.Event()
    charges: list[Any] = []

    async def charge(args: dict[str, Any]) -> Any:
        charging.set()
        await charged.wait()
        charges.append(args)
        return {"charged": args["cents"]}

    async def shop(ctx: AttemptContext) -> Outcome:
        await ctx.tool("charge", {"cents": 5}, charge, side_effect=True)
        await ctx.append("message", {"text": "charged; now the receipt"})
        return Completed("all done")

    async with workers.running(with_bindings(Binding("shop", "d1", shop))):
        first = await client.submit(ids, agent_id="shop", input={})
        await asyncio.wait_for(charging.wait(), 30)
        second = await client.submit(
            ids, agent_id="scripted", input=[{"say": "instead"}], if_busy="interrupt"
        )
        assert second.interrupted == [first.submission_id]
        charged.set()
        status = await assert_settled_once(client, ids, 2)
    assert [s.outcome for s in status.submissions] == ["aborted", "completed"]
    assert status.submissions[0].reason == f"interrupted by {second.submission_id}"
    kinds = [(r["submission_id"], r["kind"]) for r in await client.records(ids)]
    assert (first.submission_id, "tool-result") in kinds  # what ran is recorded
    assert (first.submission_id, "message") not in kinds  # it stopped at the next boundary
    [result] = [r["body"] for r in await client.records(ids) if r["kind"] == "tool-result"]
    assert result == {"tool": "charge", "result": {"charged": 5}} and len(charges) == 1
