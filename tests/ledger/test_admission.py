"""Admission and the mutation gate against real Postgres: FIFO sequences, idempotency, the alarm."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from tests.helpers.statements import counted_pool
from threadwarden.errors import HostMismatch, IdempotencyConflict
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.gate import mark_dirty

MIN_DELAY = timedelta(milliseconds=50)


@pytest.fixture
def admissions(pool: asyncpg.Pool[Any]) -> Admissions:
    """Admissions with the default 50 ms alarm floor."""
    return Admissions(pool, minimum_alarm_delay_ms=50)


async def _host(pool: asyncpg.Pool[Any], host_id: str) -> dict[str, Any]:
    row = await pool.fetchrow("SELECT * FROM threadwarden.hosts WHERE host_id = $1", host_id)
    assert row is not None, f"host {host_id} missing"
    return dict(row)


async def _counts(pool: asyncpg.Pool[Any]) -> tuple[int, int, int]:
    """Rows in submissions, threads and hosts: what a refused admission must leave alone."""
    row = await pool.fetchrow(
        "SELECT (SELECT count(*) FROM threadwarden.submissions) AS submissions,"
        "       (SELECT count(*) FROM threadwarden.threads) AS threads,"
        "       (SELECT count(*) FROM threadwarden.hosts) AS hosts"
    )
    assert row is not None
    return row["submissions"], row["threads"], row["hosts"]


async def test_admit_creates_host_and_thread_with_fifo_sequences(
    admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    thread, other = f"{ids}-a", f"{ids}-b"
    receipts = [
        await admissions.admit(thread_id=thread, agent_id="echo", input={"n": n}, host_id=ids)
        for n in range(3)
    ]
    elsewhere = await admissions.admit(thread_id=other, agent_id="echo", input={}, host_id=ids)

    assert [r.sequence for r in receipts] == [1, 2, 3]
    assert all(r.created and r.host_id == ids and r.thread_id == thread for r in receipts)
    assert len({r.submission_id for r in receipts}) == 3
    assert elsewhere.sequence == 1  # sequences count per thread
    owner = await pool.fetchval(
        "SELECT host_id FROM threadwarden.threads WHERE thread_id = $1", thread
    )
    assert owner == ids
    rows = await pool.fetch(
        "SELECT submission_id, sequence, state, input FROM threadwarden.submissions"
        " WHERE thread_id = $1 ORDER BY sequence",
        thread,
    )
    assert [(r["submission_id"], r["sequence"]) for r in rows] == [
        (r.submission_id, r.sequence) for r in receipts
    ]
    assert [r["input"] for r in rows] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert {r["state"] for r in rows} == {"ready"}
    host = await _host(pool, ids)
    assert host["nonterminal"] == 4


async def test_admit_defaults_the_host_to_the_thread_id(
    admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    receipt = await admissions.admit(thread_id=ids, agent_id="echo", input={})
    assert receipt.host_id == ids
    assert (await _host(pool, ids))["nonterminal"] == 1


async def test_admit_stores_a_json_null_input(
    admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    receipt = await admissions.admit(thread_id=ids, agent_id="echo", input=None)
    stored = await pool.fetchval(
        "SELECT input::text FROM threadwarden.submissions WHERE submission_id = $1",
        receipt.submission_id,
    )
    assert stored == "null"


async def test_admit_replays_the_same_key_and_payload_without_writing(
    admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    first = await admissions.admit(
        thread_id=ids, agent_id="echo", input={"q": 1}, idempotency_key="k1"
    )
    before = await _host(pool, ids)
    counts = await _counts(pool)

    again = await admissions.admit(
        thread_id=ids, agent_id="echo", input={"q": 1}, idempotency_key="k1"
    )

    assert first.created and not again.created
    assert again.model_dump(exclude={"created", "wake"}) == first.model_dump(
        exclude={"created", "wake"}
    )
    assert await _counts(pool) == counts
    after = await _host(pool, ids)
    assert after["dirty"] == before["dirty"]
    assert after == before


async def test_admit_refuses_the_same_key_for_a_different_payload_and_writes_nothing(
    admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={"q": 1}, idempotency_key="k1")
    before = await _host(pool, ids)
    counts = await _counts(pool)

    with pytest.raises(IdempotencyConflict, match="'k1'"):
        await admissions.admit(thread_id=ids, agent_id="echo", input={"q": 2}, idempotency_key="k1")
    with pytest.raises(IdempotencyConflict):
        await admissions.admit(
            thread_id=ids, agent_id="other", input={"q": 1}, idempotency_key="k1"
        )

    assert await _counts(pool) == counts
    assert await _host(pool, ids) == before


async def test_admit_refuses_a_thread_owned_by_another_host_and_writes_nothing(
    admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    thread = f"{ids}-t"
    await admissions.admit(thread_id=thread, agent_id="echo", input={}, host_id=f"{ids}-h1")
    before = await _host(pool, f"{ids}-h1")
    counts = await _counts(pool)

    with pytest.raises(HostMismatch, match=f"{ids}-h1"):
        await admissions.admit(thread_id=thread, agent_id="echo", input={}, host_id=f"{ids}-h2")

    assert await _counts(pool) == counts
    assert await _host(pool, f"{ids}-h1") == before
    missing = await pool.fetchval(
        "SELECT count(*) FROM threadwarden.hosts WHERE host_id = $1", f"{ids}-h2"
    )
    assert missing == 0


async def test_admit_bumps_dirty_and_arms_the_alarm_at_the_minimum_delay(
    admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    await pool.execute("UPDATE threadwarden.hosts SET alarm_at = NULL WHERE host_id = $1", ids)
    dirty = (await _host(pool, ids))["dirty"]

    started = await pool.fetchval("SELECT clock_timestamp()")
    await admissions.admit(thread_id=ids, agent_id="echo", input={"again": True})
    ended = await pool.fetchval("SELECT clock_timestamp()")

    host = await _host(pool, ids)
    assert host["dirty"] == dirty + 1
    assert started + MIN_DELAY <= host["alarm_at"] <= ended + MIN_DELAY


async def test_admit_keeps_an_earlier_alarm(
    admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    earlier = await pool.fetchval(
        "UPDATE threadwarden.hosts SET alarm_at = clock_timestamp() - interval '1 day'"
        " WHERE host_id = $1 RETURNING alarm_at",
        ids,
    )
    dirty = (await _host(pool, ids))["dirty"]

    await admissions.admit(thread_id=ids, agent_id="echo", input={"again": True})

    host = await _host(pool, ids)
    assert host["alarm_at"] == earlier
    assert host["dirty"] == dirty + 1


async def test_mark_dirty_without_invalidating_recovery_arms_the_alarm_only(
    admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    await pool.execute("UPDATE threadwarden.hosts SET alarm_at = NULL WHERE host_id = $1", ids)
    before = await _host(pool, ids)

    async with pool.acquire() as conn, conn.transaction():
        started = await conn.fetchval("SELECT clock_timestamp()")
        dirty = await mark_dirty(conn, ids, minimum_alarm_delay_ms=50, invalidates_recovery=False)
        ended = await conn.fetchval("SELECT clock_timestamp()")

    after = await _host(pool, ids)
    assert dirty == before["dirty"] == after["dirty"]
    assert after["processed"] == before["processed"]
    assert started + MIN_DELAY <= after["alarm_at"] <= ended + MIN_DELAY


async def test_mark_dirty_invalidating_recovery_bumps_the_generation(
    admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    before = await _host(pool, ids)

    async with pool.acquire() as conn, conn.transaction():
        dirty = await mark_dirty(conn, ids, minimum_alarm_delay_ms=50)

    assert dirty == before["dirty"] + 1 == (await _host(pool, ids))["dirty"]


async def test_admit_concurrent_same_key_creates_one_submission(
    admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    receipts = await asyncio.gather(
        *(
            admissions.admit(thread_id=ids, agent_id="echo", input={"q": 1}, idempotency_key="k")
            for _ in range(5)
        )
    )

    assert sum(r.created for r in receipts) == 1
    assert len({(r.submission_id, r.sequence) for r in receipts}) == 1
    stored = await pool.fetchval(
        "SELECT count(*) FROM threadwarden.submissions WHERE thread_id = $1", ids
    )
    assert stored == 1
    assert (await _host(pool, ids))["nonterminal"] == 1


async def test_admission_asks_for_a_wake_only_when_it_moved_the_alarm_earlier(
    admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    first = await admissions.admit(thread_id=ids, agent_id="echo", input=1)
    assert first.wake  # a new host: nothing was armed
    second = await admissions.admit(thread_id=ids, agent_id="echo", input=2)
    assert not second.wake  # the first admission's alarm is as early: its pass sees this one
    replay = await admissions.admit(thread_id=ids, agent_id="echo", input=3, idempotency_key="k")
    again = await admissions.admit(thread_id=ids, agent_id="echo", input=3, idempotency_key="k")
    assert not again.created and not again.wake  # nothing written, nothing to wake for
    assert replay.submission_id == again.submission_id

    # A later alarm (a backoff, a binding retry) or none at all: the admission must wake.
    await pool.execute(
        "UPDATE threadwarden.hosts SET alarm_at = clock_timestamp() + interval '1 minute'"
        " WHERE host_id = $1",
        ids,
    )
    assert (await admissions.admit(thread_id=ids, agent_id="echo", input=4)).wake
    await pool.execute("UPDATE threadwarden.hosts SET alarm_at = NULL WHERE host_id = $1", ids)
    assert (await admissions.admit(thread_id=ids, agent_id="echo", input=5)).wake
    host = await _host(pool, ids)
    assert host["nonterminal"] == 5


async def test_an_enqueue_admission_and_its_replay_are_one_statement_each(
    database_url: str, ids: str
) -> None:
    async with counted_pool(database_url) as counted:
        admissions = Admissions(counted.pool, minimum_alarm_delay_ms=50)
        await counted.taken()
        first = await admissions.admit(
            thread_id=ids, agent_id="echo", input={"q": 1}, idempotency_key="k1"
        )
        admitted = await counted.taken()
        again = await admissions.admit(
            thread_id=ids, agent_id="echo", input={"q": 1}, idempotency_key="k1"
        )
        replayed = await counted.taken()

    assert first.created and not again.created
    assert again.submission_id == first.submission_id
    # The read and the gated write in one round trip; the replay's write is guarded out.
    assert len(admitted) == 1, admitted
    assert len(replayed) == 1, replayed
