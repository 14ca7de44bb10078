"""The publication drain on real Postgres: no connection is held while another is awaited, the
built-in NOTIFY commits with the acknowledgement in one statement, external sinks run outside
connections and row locks, and a failure backs the batch off without deleting it."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from tests.helpers.sinks import RecordingSink
from tests.helpers.statements import counted_pool
from threadwarden.ledger.pool import create_pool
from threadwarden.ledger.projection import Projection
from threadwarden.ledger.publication import (
    CLAIM_LEASE_MS,
    NOTIFY_CHANNEL,
    NotifySink,
    Publications,
    pending_deadline,
)
from threadwarden.ledger.records import insert_record
from threadwarden.publication import PublicationSink, PublishedRecord

DEADLINE_S = 60
"""Every test is bounded: a regression (a pool deadlock) fails instead of hanging."""
SENTINEL = "sentinel"


async def seed(
    pool: asyncpg.Pool[Any], prefix: str, *, hosts: int, threads: int, records: int
) -> dict[str, list[str]]:
    """Outbox rows through the one insert path: per host, ``threads`` threads of ``records``
    records each, inserted interleaved (last thread first) so that insertion order is not
    thread/sequence order. Returns each host's record ids in thread/sequence order."""
    seeded: dict[str, list[str]] = {}
    for h in range(hosts):
        host = f"{prefix}-h{h}"
        names = [f"{host}-t{t}" for t in range(threads)]
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("INSERT INTO threadwarden.hosts (host_id) VALUES ($1)", host)
            for name in names:
                await conn.execute(
                    "INSERT INTO threadwarden.threads (thread_id, host_id) VALUES ($1, $2)",
                    name,
                    host,
                )
                await conn.execute(
                    "INSERT INTO threadwarden.submissions (submission_id, thread_id, sequence,"
                    " idempotency_key, payload_digest, agent_id, input, state)"
                    " VALUES ($1, $1, 1, $1, 'd', 'echo', '{}', 'ready')",
                    name,
                )
            for n in range(records):
                for name in reversed(names):
                    await insert_record(
                        conn, thread_id=name, submission_id=name, kind="note", body=n, epoch=0
                    )
        seeded[host] = [f"{name}:{s}" for name in names for s in range(1, records + 1)]
    return seeded


async def outbox(pool: asyncpg.Pool[Any], host: str | None = None) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT record_id, attempts, last_error, not_before,"
        "       not_before - clock_timestamp() AS due_in"
        "  FROM threadwarden.publications WHERE $1::text IS NULL OR host_id = $1"
        " ORDER BY thread_id, sequence",
        host,
    )


@dataclass
class Listener:
    """LISTEN on a plain connection of its own; ``settled`` waits for a sentinel NOTIFY sent
    after everything else, so every notification committed before it has arrived."""

    conn: asyncpg.Connection[Any]
    got: list[dict[str, Any]] = field(default_factory=list)
    sentinel: asyncio.Event = field(default_factory=asyncio.Event)

    def on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        if payload == SENTINEL:
            self.sentinel.set()
        else:
            self.got.append(json.loads(str(payload)))

    async def settled(self, pool: asyncpg.Pool[Any]) -> list[dict[str, Any]]:
        await pool.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, SENTINEL)
        await self.sentinel.wait()
        return self.got


async def close(pool: asyncpg.Pool[Any]) -> None:
    """Close, bounded: a regression that leaks a held connection must not hang the teardown."""
    try:
        await asyncio.wait_for(pool.close(), 10)
    except TimeoutError:
        pool.terminate()


@pytest.fixture
async def listener(database_url: str) -> AsyncIterator[Listener]:
    conn = await asyncpg.connect(database_url)
    heard = Listener(conn)
    await conn.add_listener(NOTIFY_CHANNEL, heard.on_notify)
    yield heard
    await conn.close()


@pytest.fixture
async def pool2(database_url: str) -> AsyncIterator[asyncpg.Pool[Any]]:
    created = await create_pool(database_url, max_size=2)
    yield created
    await close(created)


@pytest.fixture
async def pool1(database_url: str) -> AsyncIterator[asyncpg.Pool[Any]]:
    created = await create_pool(database_url, min_size=1, max_size=1)
    yield created
    await close(created)


class CountingSink:
    """Records every batch it receives; yields to the loop so concurrent drains interleave."""

    name = "counting"

    def __init__(self) -> None:
        self.batches: list[list[PublishedRecord]] = []

    async def publish(self, records: Sequence[PublishedRecord]) -> None:
        await asyncio.sleep(0)
        self.batches.append(list(records))


@pytest.mark.parametrize("external", [False, True], ids=["notify-only", "notify+external"])
async def test_twenty_concurrent_drains_on_a_two_connection_pool_publish_each_record_once(
    pool: asyncpg.Pool[Any],
    pool2: asyncpg.Pool[Any],
    listener: Listener,
    ids: str,
    external: bool,
) -> None:
    seeded = await seed(pool, ids, hosts=4, threads=3, records=50)  # 150 records per host
    everything = [r for records in seeded.values() for r in records]
    counting = CountingSink()
    sinks: list[PublicationSink] = [NotifySink(pool2), *([counting] if external else [])]
    publications = Publications(pool2, sinks)
    hosts = list(seeded) * 5  # 20 drains, 5 per host: room for 500 records per host
    async with asyncio.timeout(DEADLINE_S):
        published = await asyncio.gather(*(publications.drain(h) for h in hosts))
        assert sum(published) == len(everything)
        assert await outbox(pool) == []
        heard = await listener.settled(pool)
    notified = Counter(n["record_id"] for n in heard)
    assert notified == Counter(everything), "each record notified exactly once"
    assert {n["kind"] for n in heard} == {"note"}
    if external:
        received = [r.record_id for batch in counting.batches for r in batch]
        assert Counter(received) == Counter(everything), "each record to the sink exactly once"
        for batch in counting.batches:  # every batch in thread/sequence order
            keys = [(r.thread_id, r.sequence) for r in batch]
            assert keys == sorted(keys)


@pytest.mark.parametrize("joins", ["default", "hash"])
async def test_notifications_follow_sequence_order_within_each_thread(
    pool: asyncpg.Pool[Any], database_url: str, listener: Listener, ids: str, joins: str
) -> None:
    """Whatever the plan: with hash joins the deleted rows come back in the outbox's physical
    (insertion) order, and only the statement's ORDER BY puts the notifications in order."""
    (host, expected), *_ = (await seed(pool, ids, hosts=1, threads=3, records=30)).items()
    if joins == "hash":
        database = await pool.fetchval("SELECT current_database()")
        await pool.execute(
            f'ALTER DATABASE "{database}" SET enable_nestloop = off;'
            f' ALTER DATABASE "{database}" SET enable_mergejoin = off'
        )
    planned = await create_pool(database_url, max_size=1)  # sessions with those settings
    try:
        publications = Publications(planned, [NotifySink(planned)])
        async with asyncio.timeout(DEADLINE_S):
            assert await publications.drain(host) == len(expected)
            heard = await listener.settled(pool)
    finally:
        await close(planned)
    assert [n["record_id"] for n in heard] == expected
    first = heard[0]
    assert first == {
        "thread_id": f"{host}-t0",
        "sequence": 1,
        "record_id": f"{host}-t0:1",
        "kind": "note",
    }


@pytest.mark.parametrize(
    ("external", "statements"), [(False, 1), (True, 2)], ids=["notify-only", "notify+external"]
)
async def test_a_drain_is_one_autocommit_statement_with_only_the_notify_sink_two_with_sinks(
    pool: asyncpg.Pool[Any],
    pool1: asyncpg.Pool[Any],
    listener: Listener,
    ids: str,
    external: bool,
    statements: int,
) -> None:
    (warm, _), (host, expected) = (await seed(pool, ids, hosts=2, threads=2, records=5)).items()
    logged: list[str] = []
    async with pool1.acquire() as conn:  # the pool's one connection
        conn.add_query_logger(lambda q: logged.append(q.query))
        reset = conn.get_reset_query()
    sinks: list[PublicationSink] = [NotifySink(pool1), *([RecordingSink()] if external else [])]
    publications = Publications(pool1, sinks)
    async with asyncio.timeout(DEADLINE_S):
        if external:  # asyncpg introspects the array types of the acknowledgement once
            await publications.drain(warm)
        await asyncio.sleep(0)  # run the logger callbacks scheduled so far (call_soon)
        logged.clear()
        assert await publications.drain(host) == len(expected)
        await asyncio.sleep(0)
        heard = await listener.settled(pool)
    # The pool's own reset on release (asyncpg's housekeeping) is not the drain's.
    drained = [q for q in logged if q != reset]
    assert len(drained) == statements, drained
    assert not any(q.lstrip().upper().startswith(("BEGIN", "START")) for q in logged), logged
    assert [n["record_id"] for n in heard][-len(expected) :] == expected
    assert await outbox(pool, host) == []


class AcquiringFailingSink:
    """A sink that needs a connection of the drain's own pool, checks that no claimed row is
    locked, then fails."""

    name = "acquiring"

    def __init__(self, pool: asyncpg.Pool[Any]) -> None:
        self._pool = pool
        self.calls = 0

    async def publish(self, records: Sequence[PublishedRecord]) -> None:
        self.calls += 1
        async with self._pool.acquire() as conn:  # deadlocks if the drain holds the only one
            locked = await conn.fetch(  # raises LockNotAvailable if the drain holds row locks
                "SELECT record_id FROM threadwarden.publications"
                " WHERE record_id = ANY($1::text[]) FOR UPDATE NOWAIT",
                [r.record_id for r in records],
            )
        assert len(locked) == len(records)
        raise ConnectionError("sink unreachable")


async def test_a_failing_sink_runs_outside_connections_and_locks_and_backs_the_batch_off(
    pool: asyncpg.Pool[Any], pool1: asyncpg.Pool[Any], listener: Listener, ids: str
) -> None:
    (host, expected), *_ = (await seed(pool, ids, hosts=1, threads=2, records=5)).items()
    sink = AcquiringFailingSink(pool1)
    publications = Publications(pool1, [NotifySink(pool1), sink])
    async with asyncio.timeout(DEADLINE_S):
        assert await publications.drain(host) == 0
        heard = await listener.settled(pool)
    assert sink.calls == 1
    rows = await outbox(pool, host)
    assert [r["record_id"] for r in rows] == expected, "nothing deleted"
    assert {r["attempts"] for r in rows} == {1}
    assert all("sink unreachable" in r["last_error"] for r in rows)
    # Backed off by 1 s·2^0 from the failure (no longer the claim's lease).
    assert all(r["due_in"] <= timedelta(seconds=1) for r in rows), rows
    assert heard == [], "nothing notified for an unacknowledged batch"
    assert (await publications.gate(host)) is None  # no required sink: no gate


async def test_an_abandoned_claim_comes_due_again_after_its_lease(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    (host, expected), *_ = (await seed(pool, ids, hosts=1, threads=1, records=3)).items()

    class Vanishing:
        name = "vanishing"

        async def publish(self, records: Sequence[PublishedRecord]) -> None:
            raise asyncio.CancelledError  # the worker died (or the activity was cancelled)

    async with asyncio.timeout(DEADLINE_S):
        with pytest.raises(asyncio.CancelledError):
            await Publications(pool, [Vanishing()]).drain(host)
    rows = await outbox(pool, host)
    assert [r["record_id"] for r in rows] == expected
    assert {r["attempts"] for r in rows} == {0}
    lease = timedelta(milliseconds=CLAIM_LEASE_MS)
    assert all(lease - timedelta(seconds=5) < r["due_in"] <= lease for r in rows), rows
    async with pool.acquire() as conn:
        due = await pending_deadline(conn, host)
    assert due == min(r["not_before"] for r in rows)


async def test_a_drain_does_not_acknowledge_rows_another_drain_claimed_again(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    """The first drain's lease runs out while its sink works; a second drain claims the rows
    again and its sink fails. The first drain's late acknowledgement must not delete them."""
    (host, expected), *_ = (await seed(pool, ids, hosts=1, threads=1, records=3)).items()
    failing = RecordingSink()
    failing.failing = True
    second = Publications(pool, [failing])

    class Slow:
        name = "slow"

        async def publish(self, records: Sequence[PublishedRecord]) -> None:
            await pool.execute(  # the claim's lease runs out
                "UPDATE threadwarden.publications SET not_before = clock_timestamp()"
                " WHERE host_id = $1",
                host,
            )
            assert await second.drain(host) == 0  # claims them again, then backs them off

    async with asyncio.timeout(DEADLINE_S):
        assert await Publications(pool, [Slow()]).drain(host) == 0
    rows = await outbox(pool, host)
    assert [r["record_id"] for r in rows] == expected, "the stale claim deleted nothing"
    assert {r["attempts"] for r in rows} == {1}
    assert failing.calls == 1


async def test_publishing_after_a_commit_refreshes_the_summary_and_reads_the_host_at_once(
    pool: asyncpg.Pool[Any], database_url: str, listener: Listener, ids: str
) -> None:
    ((host, expected),) = (await seed(pool, ids, hosts=1, threads=2, records=3)).items()
    thread = f"{host}-t0"
    async with counted_pool(database_url) as counted:
        publications = Publications(counted.pool, [NotifySink(counted.pool)])
        await counted.taken()
        async with asyncio.timeout(DEADLINE_S):
            committed = await publications.publish_committed(host, refresh=[thread], view=True)
            statements = await counted.taken()
            heard = await listener.settled(pool)

    # The summary, the NOTIFYs (in thread/sequence order), the delete and the host's read.
    assert committed.refreshed and len(statements) == 1, statements
    assert [n["record_id"] for n in heard] == expected
    assert await outbox(pool, host) == []
    summary = await Projection(pool).summary(thread)
    assert summary is not None
    assert (summary.last_sequence, summary.last_kind, summary.states) == (3, "note", {"ready": 1})
    view = committed.view
    assert view is not None and view["updated_at"] is not None
    # As a finish reads it: both heads remain, and the records it published are not due.
    assert [r["thread_id"] for r in view["remaining"]] == [f"{host}-t0", f"{host}-t1"]
    assert view["publication_due"] is None


async def test_when_the_summary_fails_publishing_after_a_commit_still_drains_the_records(
    pool: asyncpg.Pool[Any], listener: Listener, ids: str
) -> None:
    ((host, expected),) = (await seed(pool, ids, hosts=1, threads=1, records=2)).items()
    await pool.execute(  # the summaries' table refuses every write (this test's own database)
        "CREATE FUNCTION threadwarden.refuse() RETURNS trigger LANGUAGE plpgsql AS"
        " $$BEGIN RAISE EXCEPTION 'summaries down'; END$$;"
        " CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON threadwarden.thread_summaries"
        " FOR EACH ROW EXECUTE FUNCTION threadwarden.refuse()"
    )
    publications = Publications(pool, [NotifySink(pool)])
    async with asyncio.timeout(DEADLINE_S):
        committed = await publications.publish_committed(host, refresh=[f"{host}-t0"], view=True)
        heard = await listener.settled(pool)

    # Logged, not raised; the records went out on their own, the caller refreshes the summary.
    assert (committed.refreshed, committed.view) == (False, None)
    assert [n["record_id"] for n in heard] == expected
    assert await outbox(pool, host) == []
