"""Abort (issue 4 §7) and yield (§8, brief scenario 21) end to end.

Abort settles a submission ``aborted`` at once when no attempt runs it (queued, even behind a
running head; suspended), and at the running attempt's next committed boundary otherwise; a
settled submission is left as it is. Yield: an attempt past ``yield_after`` stops at a committed
boundary and the next pass resumes from the journal, so nothing committed runs twice. Every test
runs a real worker against the Temporal dev server and a fresh Postgres database.

Operator settlements are written at the operator's fenced epoch, not at the epoch of the
submission's last attempt, so aborted threads are checked with `recorded_once` below instead of
`assert_settled_once` (which also expects settlements in queue order; an aborted follower settles
before the head it was queued behind).
"""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tests.helpers.checks import (
    assert_settled_once,
    converged,
    host_row,
    recorded_once,
    say,
    submission_rows,
)
from tests.helpers.idle import idle_host
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """No inline heads: these heads sleep for seconds inside one attempt, which an inline
    binding's first attempt would hand over to the agent's queue after its budget
    (`inline_budget_ms`); here every attempt is dispatched, as an agent's would be."""
    return settings.model_copy(update={"inline_budget_ms": 0})


LONG = [{"say": "long"}, {"sleep_ms": 6_000}, {"say": "long done"}]
STEPPED = [
    {"say": "a"},
    {"sleep_ms": 1_500},
    {"say": "b"},
    {"sleep_ms": 1_500},
    {"say": "c"},
]
YIELDING = [
    {"say": "1"},
    {"sleep_ms": 1_500},
    {"say": "2"},
    {"sleep_ms": 1_500},
    {"say": "3"},
]


def messages(records: list[dict[str, Any]], submission_id: str | None = None) -> list[str]:
    return [
        r["body"]["text"]
        for r in records
        if r["kind"] == "message" and submission_id in (None, r["submission_id"])
    ]


def settlement_of(records: list[dict[str, Any]], submission_id: str) -> dict[str, Any]:
    [found] = [
        r for r in records if r["kind"] == "settlement" and r["submission_id"] == submission_id
    ]
    return found


async def running_with(client: ThreadwardenClient, thread: str, text: str) -> None:
    """Wait until the head's attempt has committed the message ``text``."""
    await eventually(
        lambda: client.records(thread),
        lambda records: text in messages(records),
        what=f"{text!r} said on {thread}",
    )


# --- abort ----------------------------------------------------------------------------------


async def abort_follower_of_a_running_head(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], thread: str
) -> tuple[str, str]:
    """Abort a queued follower while the head's attempt sleeps; check it settled at once."""
    head = await client.submit(thread, agent_id="scripted", input=LONG)
    queued = await client.submit(thread, agent_id="scripted", input=say("never said"))
    await running_with(client, thread, "long")
    [running, waiting] = await submission_rows(pool, thread)
    assert (running["state"], waiting["state"]) == ("running", "ready")

    aborted = await client.abort(queued.submission_id)
    assert (aborted.state, aborted.outcome, aborted.changed) == ("settled", "aborted", True)
    # At once: settled while the head's attempt is still sleeping.
    [still_running, gone] = await submission_rows(pool, thread)
    assert (gone["state"], gone["outcome"], gone["attempts"]) == ("settled", "aborted", 0)
    assert still_running["state"] == "running"
    records = await client.records(thread)
    assert settlement_of(records, queued.submission_id)["body"] == {
        "outcome": "aborted",
        "result": None,
        "reason": "aborted by an operator",
    }
    return head.submission_id, queued.submission_id


async def test_abort_queued_behind_a_running_head_settles_at_once_and_leaves_the_head_alone(
    worker: None, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    """The follower settles at once (in the helper); the head's one attempt runs on to its end:
    each of its steps said once, every record of it at that attempt's epoch."""
    head, queued = await abort_follower_of_a_running_head(client, pool, ids)

    records = await recorded_once(client, ids, ["completed", "aborted"])
    assert messages(records, head) == ["long", "long done"]  # each step said once
    assert messages(records, queued) == []
    [first, _] = await submission_rows(pool, ids)
    assert first["attempts"] == 1
    head_epochs = {r["epoch"] for r in records if r["submission_id"] == head}
    assert head_epochs == {first["epoch"]}  # one attempt wrote every record of the head
    await converged(client, ids)


async def test_abort_running_submission_settles_at_its_next_committed_boundary(
    worker: None, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    receipt = await client.submit(ids, agent_id="scripted", input=STEPPED)
    await client.submit(ids, agent_id="scripted", input=say("follower"))
    await running_with(client, ids, "a")

    requested = await client.abort(receipt.submission_id)
    assert (requested.state, requested.outcome, requested.changed) == ("running", None, True)
    [row, _] = await submission_rows(pool, ids)
    assert row["abort_requested"] is True

    records = await recorded_once(client, ids, ["aborted", "completed"])
    said = messages(records, receipt.submission_id)
    assert said in (["a"], ["a", "b"])  # stopped at the next append: "c" was never written
    settlement = settlement_of(records, receipt.submission_id)
    assert settlement["body"]["outcome"] == "aborted"
    assert settlement["body"]["reason"] == "aborted by an operator"
    [aborted, follower] = (await client.thread_status(ids)).submissions
    assert aborted.attempts == 1 and follower.outcome == "completed"
    assert messages(records)[-1] == "follower"
    await converged(client, ids)


async def test_abort_suspended_submission_settles_at_once(
    worker: None, client: ThreadwardenClient, ids: str
) -> None:
    receipt = await client.submit(ids, agent_id="scripted", input=[{"approval": "refund"}])
    await client.submit(ids, agent_id="scripted", input=say("follower"))
    await eventually(
        lambda: client.thread_status(ids),
        lambda s: s.submissions[0].state == "suspended",
        what="head suspended",
    )

    aborted = await client.abort(receipt.submission_id)
    assert (aborted.state, aborted.outcome, aborted.changed) == ("settled", "aborted", True)
    records = await recorded_once(client, ids, ["aborted", "completed"])
    assert [r["kind"] for r in records if r["submission_id"] == receipt.submission_id] == [
        "approval-requested",
        "settlement",
    ]
    assert settlement_of(records, receipt.submission_id)["body"]["outcome"] == "aborted"
    await converged(client, ids)


@pytest.mark.usefixtures("worker")
async def test_abort_settled_submission_is_a_no_op(
    client: ThreadwardenClient, connections: Connections, pool: asyncpg.Pool[Any], ids: str
) -> None:
    # No pass is left: a snapshot stays still.
    receipt = await idle_host(client, connections, ids, "done")

    async def snapshot() -> tuple[Any, ...]:
        host = await host_row(pool, ids)
        return (host, await submission_rows(pool, ids), await client.records(ids))

    before = await snapshot()
    again = await client.abort(receipt.submission_id)
    assert (again.state, again.outcome, again.changed) == ("settled", "completed", False)
    assert await snapshot() == before


# --- yield: scenario 21 -----------------------------------------------------------------------


async def test_scenario_21_yield_resumes_without_rerunning_committed_steps(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    async with workers.tuned(yield_after_ms=1_000, pass_deadline_ms=20_000).running():
        receipt = await client.submit(ids, agent_id="scripted", input=YIELDING)
        status = await assert_settled_once(client, ids, 1)
        host = await converged(client, ids)
    [submission] = status.submissions
    assert submission.outcome == "completed"
    assert submission.attempts >= 2
    assert host.last_error is None  # yields, not pass deadlines
    records = await client.records(ids)
    assert messages(records) == ["1", "2", "3"]  # each committed step exactly once
    # Written by different attempts: the yield stopped one and a later one resumed.
    epochs = {r["epoch"] for r in records if r["submission_id"] == receipt.submission_id}
    assert len(epochs) >= 2
    settlement = settlement_of(records, receipt.submission_id)
    assert settlement["body"]["result"] == {"said": ["1", "2", "3"]}
