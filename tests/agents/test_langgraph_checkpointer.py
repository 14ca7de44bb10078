"""The LangGraph checkpointer on the ledger (`LedgerSaver`), against the test's real Postgres:
LangGraph's own conformance suite for checkpointers, fencing (a stale attempt saves nothing),
the journal position a resumed attempt reads back, the state a thread's next submission
starts from (its completed submission's, never a failed one's), rebuilt from a chain of what
changed that stays short when replaced values outweigh live ones, and from a checkpoint saved
whole by an earlier version."""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypedDict

import asyncpg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from tests.helpers.graph_agents import shop
from tests.helpers.ledger import Ledger
from threadwarden.activities.context import JournaledContext
from threadwarden.activities.journal import Journal
from threadwarden.agents.langgraph import LedgerSaver
from threadwarden.errors import InvalidInput, StaleAttempt, StalePass
from threadwarden.ledger.checkpoints import CARRIED, Checkpoints
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


class Pad(TypedDict, total=False):
    note: str
    notes: Annotated[list[str], operator.add]  # grows by one short note a turn
    draft: str  # replaced every turn, ~1 KB


def jot(state: Pad) -> Pad:
    return {"notes": [state["note"]], "draft": state["note"] * 300}


def pad() -> StateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Pad)
    builder.add_node("jot", jot)
    builder.add_edge(START, "jot")
    builder.add_edge("jot", END)
    return builder


async def pad_turn(ledger: Ledger, thread: str, note: str) -> tuple[int, dict[str, Any]]:
    """One completed turn of `pad`: how many checkpoints it read, and its final state."""
    await ledger.admit(thread)
    ctx = context(ledger, await ledger.claim(thread))
    read = len(await ctx.checkpoints())
    graph = pad().compile(checkpointer=await LedgerSaver.load(ctx))
    await graph.ainvoke({"note": note}, config(thread), durability="sync")
    await ledger.attempts.settle(ctx._claim, "completed")
    return read, dict((await graph.aget_state(config(thread))).values)


async def test_langgraph_checkpointer_cuts_the_chain_where_replaced_values_outweigh_live_ones(
    ledger: Ledger, ids: str
) -> None:
    notes = [f"n{n:02}" for n in range(12)]
    turns = [await pad_turn(ledger, ids, note) for note in notes]
    read = [r for r, _ in turns]
    assert read[0] == 0
    assert max(read) <= 2 * 3, read  # two turns of three checkpoints at most, never all 12
    assert turns[-1][1] == {"note": "n11", "notes": notes, "draft": "n11" * 300}


async def test_langgraph_checkpointer_rebuilds_a_submissions_own_checkpoints_from_their_pieces(
    ledger: Ledger, ids: str
) -> None:
    """A re-run reads this submission's checkpoints back (pieces on the carried chain, some
    saved whole): every one of them holds the values the run that saved them had."""
    for note in ("n00", "n01", "n02"):
        await pad_turn(ledger, ids, note)
    await ledger.admit(ids)
    claim = await ledger.claim(ids)
    ran = pad().compile(checkpointer=await LedgerSaver.load(context(ledger, claim)))
    for note in ("n03", "n04", "n05"):  # three runs in one submission
        await ran.ainvoke({"note": note}, config(ids), durability="sync")

    saved = await ledger.pool.fetch(
        "SELECT meta FROM threadwarden.checkpoints WHERE submission_id = $1", claim.submission_id
    )
    assert {r["meta"].get("delta") for r in saved} == {True, False, None}  # and pending writes

    rerun = pad().compile(checkpointer=await LedgerSaver.load(context(ledger, claim)))
    history = [s async for s in ran.aget_state_history(config(ids))]
    assert [s async for s in rerun.aget_state_history(config(ids))] == history
    assert len(history) == 1 + 3 * 3 and history[0].values["notes"][-1] == "n05"


async def test_langgraph_checkpointer_continues_from_a_checkpoint_saved_whole(
    ledger: Ledger, ids: str
) -> None:
    """A thread whose carried checkpoint an earlier version saved whole (every channel's
    value, no ``values`` of what changed) goes on from it."""
    memory = InMemorySaver()
    await pad().compile(checkpointer=memory).ainvoke({"note": "n00"}, config(ids))
    saved = memory.get_tuple(config(ids))
    assert saved is not None and saved.parent_config is not None
    await ledger.admit(ids)
    ctx = context(ledger, await ledger.claim(ids))
    parent = saved.parent_config["configurable"]["checkpoint_id"]
    value = {"checkpoint": saved.checkpoint, "metadata": saved.metadata, "parent": parent}
    kind, data = memory.serde.dumps_typed(value)
    meta = {"op": "put", "thread_id": ids, "ns": "", "checkpoint_id": saved.checkpoint["id"]}
    await ctx.save_checkpoint({**meta, "parent": parent, "type": kind}, data, carry=True)
    await ledger.attempts.settle(ctx._claim, "completed")

    for note in ("n01", "n02"):
        _, state = await pad_turn(ledger, ids, note)
    assert state["notes"] == ["n00", "n01", "n02"]


async def test_langgraph_checkpointer_reads_the_chain_not_the_thread(
    ledger: Ledger, ids: str
) -> None:
    """On a thread of 10,000 checkpoints (100 turns of 100, two in three carried), the carried
    read walks back from the newest to the newest whole one of a completed turn and no further:
    the 5 turns since it, whatever the turns before."""
    for turn in range(100):
        await ledger.admit(ids)
        claim = await ledger.claim(ids)
        await ledger.pool.execute(
            "INSERT INTO threadwarden.checkpoints"
            " (thread_id, submission_id, epoch, step, carry, meta, data)"
            " SELECT $1, $2, 1, 0, n % 3 <> 0, jsonb_build_object('delta', NOT $3 OR n > 1), ''"
            "   FROM generate_series(0, 99) n",
            ids,
            claim.submission_id,
            turn == 95,
        )
        await ledger.attempts.settle(claim, "completed" if turn != 97 else "failed")
    await ledger.pool.execute("ANALYZE threadwarden.checkpoints")

    chain = await ledger.pool.fetch(CARRIED, ids, "sub_none", "echo")
    assert len(chain) == 4 * 66 and chain[0]["meta"] == {"delta": False}  # the failed one's not
    explained = await ledger.pool.fetch(
        f"EXPLAIN (ANALYZE, FORMAT TEXT) {CARRIED}", ids, "-", "echo"
    )
    plan = "\n".join(row[0] for row in explained)
    walked = re.search(r"Recursive Union .*actual .*rows=(\d+)", plan)
    assert walked is not None and int(walked.group(1)) == 5 * 66, plan
