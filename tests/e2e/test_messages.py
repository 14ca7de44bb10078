"""Messages between threads: committed with the sender's step, delivered at least once by the
source host's passes, accepted at most once at the destination, linked back to the source."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import asyncpg

from tests.helpers.checks import assert_settled_once, converged, say, settled
from tests.helpers.idle import idle_host
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.settings import Settings
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.messages import DELIVERY_BATCH, Message, Messages


def send(thread: str, text: str, **extra: Any) -> list[dict[str, Any]]:
    """A scripted input that sends one message to ``thread`` and then says it did."""
    return [{"send": {"thread": thread, "input": say(text), **extra}}, {"say": "sent"}]


async def delivered(client: ThreadwardenClient, source: str, count: int) -> list[Message]:
    return await eventually(
        lambda: client.messages_sent(source),
        lambda sent: [m.state for m in sent] == ["delivered"] * count,
        what=f"{count} message(s) from {source} delivered",
    )


async def message_rows(pool: asyncpg.Pool[Any], source: str) -> list[dict[str, Any]]:
    rows = await pool.fetch(
        "SELECT * FROM threadwarden.messages WHERE source_thread_id = $1", source
    )
    return [dict(r) for r in rows]


async def test_message_reaches_another_thread_and_links_back(
    worker: None, client: ThreadwardenClient, ids: str
) -> None:
    source, destination = f"{ids}-a", f"{ids}-b"
    await client.submit(source, agent_id="scripted", input=send(destination, "hello b"))
    [message] = await delivered(client, source, 1)
    status = await assert_settled_once(client, destination, 1)
    accepted = status.submissions[0]
    assert accepted.submission_id == message.destination_submission_id
    assert (accepted.source_thread_id, accepted.source_message_id) == (source, message.message_id)
    sent = [r for r in await client.records(source) if r["kind"] == "message-sent"]
    assert [r["body"]["message_id"] for r in sent] == [message.message_id]
    assert [r["kind"] for r in await client.records(destination)] == ["message", "settlement"]
    await converged(client, source)
    await converged(client, destination)


async def test_message_to_a_thread_on_another_host(
    worker: None, client: ThreadwardenClient, ids: str
) -> None:
    source, destination, other_host = f"{ids}-a", f"{ids}-b", f"{ids}-host2"
    await client.submit(
        source, agent_id="scripted", input=send(destination, "across hosts", host=other_host)
    )
    [message] = await delivered(client, source, 1)
    assert message.destination_host_id == other_host
    status = await assert_settled_once(client, destination, 1)
    assert status.host_id == other_host
    await converged(client, other_host)


async def test_message_destination_slow_past_its_claim_deadline_is_retried_once_accepted(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    source, destination = f"{ids}-a", f"{ids}-b"
    workers.failpoints.arm("delivery:accept", pause=True, times=1)  # the first acceptance hangs
    async with workers.tuned(message_claim_timeout_ms=300).running():
        await client.submit(source, agent_id="scripted", input=send(destination, "late"))
        rows = await eventually(
            lambda: message_rows(pool, source),
            lambda rows: bool(rows) and rows[0]["last_error"] is not None,
            what="the timed-out claim persisted its retry",
        )
        assert "timed out" in rows[0]["last_error"]
        assert rows[0]["state"] == "pending" and rows[0]["claim_token"] is None
        [message] = await delivered(client, source, 1)
        assert message.attempts == 2
        await assert_settled_once(client, destination, 1)


async def test_message_delivery_worker_killed_between_claim_and_receipt(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    source, destination = f"{ids}-a", f"{ids}-b"
    # The destination already exists; holding its host row makes acceptance wait there, after
    # the claim committed and before the receipt.
    await client.submit(destination, agent_id="scripted", input=say("first"))
    quick = workers.tuned(message_claim_timeout_ms=2_000)
    async with quick.process("doomed") as doomed:
        await assert_settled_once(client, destination, 1)
        async with pool.acquire() as blocker, blocker.transaction():
            await blocker.execute(
                "SELECT 1 FROM threadwarden.hosts WHERE host_id = $1 FOR UPDATE", destination
            )
            await client.submit(source, agent_id="scripted", input=send(destination, "once"))
            await eventually(
                lambda: message_rows(pool, source),
                lambda rows: bool(rows) and rows[0]["claim_token"] is not None,
                what="the delivery claimed the message",
            )
            os.kill(doomed.pid, signal.SIGKILL)
            await doomed.wait()
    async with quick.running():
        [message] = await delivered(client, source, 1)
        assert message.attempts == 2  # the abandoned claim came due again at its deadline
        status = await assert_settled_once(client, destination, 2)
        assert status.submissions[1].source_message_id == message.message_id


async def test_message_delivered_twice_is_accepted_once(
    settings: Settings, pool: asyncpg.Pool[Any], client: ThreadwardenClient, ids: str
) -> None:
    """Two deliveries of one message (an expired claim and its successor) admit one
    submission and agree on the receipt."""
    source, destination = f"{ids}-a", f"{ids}-b"
    admissions = Admissions(pool, minimum_alarm_delay_ms=settings.timing.minimum_alarm_delay)
    messages = Messages(pool, admissions)
    await pool.execute(
        "INSERT INTO threadwarden.messages (message_id, source_host_id, source_thread_id,"
        " source_submission_id, destination_thread_id, agent_id, input)"
        " VALUES ($1, $2, $2, 'sub_x', $3, 'scripted', $4)",
        f"msg_{ids}",
        source,
        destination,
        say("dup"),
    )
    first = await messages.claim_due(source, claim_timeout_ms=1)
    assert first is not None
    await eventually(  # the first claim's deadline passes: the message is due again
        lambda: messages.claim_due(source, claim_timeout_ms=60_000),
        lambda claim: claim is not None,
        what="a second claim after the first one's deadline",
    )
    second_claim = (await message_rows(pool, source))[0]["claim_token"]
    receipts = await asyncio.gather(
        messages.accept(first.model_copy(update={"token": second_claim})),
        messages.accept(first.model_copy(update={"token": second_claim})),
    )
    late = await messages.accept(first)  # the first claim's delivery arrives after the receipt
    accepted = {r.submission_id for r in receipts if r is not None} | {
        late.submission_id if late else None
    }
    assert len(accepted - {None}) == 1
    status = await client.thread_status(destination)
    assert [s.source_message_id for s in status.submissions] == [f"msg_{ids}"]
    [row] = await message_rows(pool, source)
    assert row["state"] == "delivered" and row["destination_submission_id"] in accepted


async def test_message_rejected_when_the_destination_is_on_another_host(
    worker: None, client: ThreadwardenClient, ids: str
) -> None:
    source, destination = f"{ids}-a", f"{ids}-b"
    await client.submit(destination, agent_id="scripted", input=say("lives on its own host"))
    await client.submit(
        source, agent_id="scripted", input=send(destination, "wrong host", host=f"{ids}-x")
    )
    [message] = await eventually(
        lambda: client.messages_sent(source),
        lambda sent: [m.state for m in sent] == ["rejected"],
        what="the message rejected",
    )
    assert message.last_error is not None and "belongs to host" in message.last_error
    host = await converged(client, source)  # a rejected message leaves no deadline behind
    assert host.auxiliary_due is not None and host.auxiliary_due.message is None


async def test_message_backlog_does_not_hold_the_native_finish(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    """Delivery stops at its next batch once the native work finished: the pass finishes after
    the running batch, later passes deliver the rest, each message exactly once."""
    failpoints = workers.failpoints
    async with workers.running():
        destination, backlog = f"{ids}-d", DELIVERY_BATCH + 3
        # No pass may deliver the backlog before ours.
        await idle_host(client, workers.connections, ids, "first")
        # The destination lives on the same host, so no other host's pass reaches a failpoint.
        await pool.executemany(
            "INSERT INTO threadwarden.messages (message_id, source_host_id, source_thread_id,"
            " source_submission_id, destination_thread_id, destination_host_id, agent_id, input)"
            " VALUES ($1, $2, $2, 'sub_x', $3, $2, 'scripted', $4)",
            [(f"msg_{ids}_{n:02d}", ids, destination, say(f"m{n}")) for n in range(backlog)],
        )
        failpoints.arm("delivery:accept", pause=True, times=1)  # a slow first delivery
        failpoints.arm("maintenance:finish:before", pause=True, times=1)
        await client.submit(ids, agent_id="scripted", input=say("second"))
        await failpoints.reached("delivery:accept")
        await settled(client, ids, 2)  # the native work finished while the batch was running
        failpoints.release("delivery:accept")
        await failpoints.reached("maintenance:finish:before")
        rows = await message_rows(pool, ids)
        assert [r["state"] for r in rows].count("delivered") == DELIVERY_BATCH
        failpoints.release("maintenance:finish:before")
        status = await assert_settled_once(client, destination, backlog)
        rows = await message_rows(pool, ids)
        assert {r["state"] for r in rows} == {"delivered"}
        assert {r["attempts"] for r in rows} == {1}
        accepted = {r["destination_submission_id"] for r in rows}
        assert accepted == {s.submission_id for s in status.submissions}
        await converged(client, ids)
