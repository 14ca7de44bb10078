"""The LangGraph checkpointer on the ledger (`LedgerSaver`), against the test's real Postgres:
LangGraph's own conformance suite for checkpointers, fencing (a stale attempt saves nothing),
the journal position a resumed attempt reads back, and the state a thread's next submission
starts from (its completed submission's, never a failed one's)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.conformance import checkpointer_test, validate

from tests.helpers.graph_agents import shop
from tests.helpers.ledger import Ledger
from threadwarden.activities.context import JournaledContext
from threadwarden.activities.journal import Journal
from threadwarden.agents.langgraph import LedgerSaver
from threadwarden.errors import InvalidInput, StaleAttempt, StalePass
from threadwarden.ledger.checkpoints import Checkpoints
from threadwarden.ledger.claims import Claim

LATER = datetime.now(UTC) + timedelta(days=1)


@pytest.fixture
def ledger(pool: asyncpg.Pool[Any]) -> Ledger:
    """The repositories with the default timing, a 30 s lease and a 50 ms alarm floor."""
    return Ledger.defaults(pool)


def context(ledger: Ledger, claim: Claim) -> JournaledContext:
    journal = Journal(claim, ledger.attempts, LATER)
    return JournaledContext(journal, checkpoints=Checkpoints(ledger.pool))


async def rows(pool: asyncpg.Pool[Any], thread: str) -> int:
    count = await pool.fetchval(
        "SELECT count(*) FROM threadwarden.checkpoints WHERE thread_id = $1", thread
    )
    return int(count)


def config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


async def test_langgraph_checkpointer_passes_the_langgraph_conformance_suite(
    ledger: Ledger, ids: str
) -> None:
    hosts = itertools.count()

    @checkpointer_test(name="LedgerSaver")
    async def saver() -> AsyncIterator[LedgerSaver]:
        host = f"{ids}-{next(hosts)}"  # a fresh attempt for each capability's suite
        await ledger.admit(host)
        yield await LedgerSaver.load(context(ledger, await ledger.claim(host)))

    report = await validate(saver)
    report.print_report()
    assert report.passed_all_base()
    assert await rows(ledger.pool, f"{ids}-0") > 0  # it really wrote to the ledger


async def test_langgraph_checkpointer_fences_stale_attempts_and_resumes_at_the_saved_step(
    ledger: Ledger, ids: str
) -> None:
    await ledger.admit(ids)
    first = context(ledger, await ledger.claim(ids))
    saver = await LedgerSaver.load(first)
    assert not saver.resuming
    graph = shop().compile(checkpointer=saver)
    await first.append("note", {"before": "the graph"})  # journal step 1
    await graph.ainvoke({"item": "hat"}, config(ids), durability="sync")  # up to interrupt
    saved = await rows(ledger.pool, ids)
    assert saved > 0

    # The worker died: its lease lapses and the next attempt owns the head.
    await ledger.lapse(first.submission_id)
    second = context(ledger, await ledger.claim(ids))
    with pytest.raises((StaleAttempt, StalePass)):  # a new pass claimed it: both are fenced
        await graph.ainvoke({"item": "cap"}, config(ids), durability="sync")
    assert await rows(ledger.pool, ids) == saved  # the zombie wrote nothing

    resumed = await LedgerSaver.load(second)
    assert (resumed.resuming, resumed.position) == (True, 1)
    state = await shop().compile(checkpointer=resumed).aget_state(config(ids))
    assert state.values == {"item": "hat", "reserved": 1}
    assert [i.value["question"] for i in state.interrupts] == ["Which size of hat?"]
    second.advance_to(resumed.position)
    assert second.steps_taken == 1
    second.advance_to(0)  # never back
    assert second.steps_taken == 1
    with pytest.raises(InvalidInput, match="step"):
        await second.save_checkpoint({"op": "x"}, b"", step=2)  # beyond the steps taken


async def test_langgraph_checkpointer_carries_a_completed_submissions_state_only(
    ledger: Ledger, ids: str
) -> None:
    async def turn(item: str, outcome: str) -> dict[str, Any]:
        await ledger.admit(ids)
        ctx = context(ledger, await ledger.claim(ids))
        graph = shop().compile(checkpointer=await LedgerSaver.load(ctx))
        await graph.ainvoke({"item": item}, config(ids), durability="sync")
        await ledger.attempts.settle(ctx._claim, outcome)  # type: ignore[arg-type]
        return dict((await graph.aget_state(config(ids))).values)

    assert (await turn("hat", "completed"))["reserved"] == 1
    assert (await turn("cap", "failed"))["reserved"] == 2  # its own run saw the carried state
    assert (await turn("cap", "completed"))["reserved"] == 2  # the failed turn's did not carry

    # Another agent on the same thread starts from nothing of this one's.
    await ledger.admissions.admit(thread_id=ids, agent_id="other", input={}, host_id=ids)
    begun = await ledger.begin(ids)
    claim = await ledger.attempts.claim_head(ids, begun.epoch, ids, bindings={"other": "d-1"})
    assert claim is not None
    assert await context(ledger, claim).checkpoints() == []
