"""The native finish writes only the host row it decided on: a mutation that commits between its
read and its write makes it decide again, so a racing commit is never acknowledged."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from tests.helpers.statements import counted_pool
from threadwarden.errors import StalePass
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.ledger.pass_finish import FINISH_TRIES
from threadwarden.ledger.publication import NotifySink, Publications
from threadwarden.protocol.decisions import Timing

BINDINGS = {"echo": "d"}


class RacingConnection:
    """A real pooled connection whose finish write is preceded by a committed mutation."""

    def __init__(self, conn: Any, race: Callable[[], Awaitable[bool]]) -> None:
        self._conn = conn
        self._race = race

    async def fetchrow(self, query: str, *args: Any) -> Any:
        return await self._conn.fetchrow(query, *args)

    async def execute(self, query: str, *args: Any) -> str:
        finishing = query.lstrip().startswith("UPDATE threadwarden.hosts") and "processed" in query
        # Under the locked fallback a racing admission would wait for this very transaction.
        if finishing and not self._conn.is_in_transaction():
            await self._race()
        return str(await self._conn.execute(query, *args))

    def transaction(self) -> Any:
        return self._conn.transaction()


class RacingPool:
    """The test's pool, handing out `RacingConnection`s."""

    def __init__(self, pool: asyncpg.Pool[Any], race: Callable[[], Awaitable[bool]]) -> None:
        self._pool = pool
        self._race = race

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[RacingConnection]:
        async with self._pool.acquire() as conn:
            yield RacingConnection(conn, self._race)


async def _finish_under_races(pool: asyncpg.Pool[Any], host_id: str, races: int) -> tuple[Any, ...]:
    admissions = Admissions(pool, minimum_alarm_delay_ms=50)
    plain = Maintenance(pool, Timing())
    await admissions.admit(thread_id=host_id, agent_id="echo", input={})
    begun = await plain.begin(host_id, datetime.now(UTC))
    attempts = Attempts(pool, lease_ms=30_000)
    claim = await attempts.claim_head(host_id, begun.epoch, host_id, bindings=BINDINGS)
    assert claim is not None
    await attempts.settle(claim, "completed", result=1)
    left = [races]

    async def race() -> bool:  # another admission commits after the finish read the row
        if left[0] == 0:
            return False
        left[0] -= 1
        await admissions.admit(thread_id=host_id, agent_id="echo", input={})
        return True

    racing = Maintenance(RacingPool(pool, race), Timing())  # type: ignore[arg-type]  # a proxy
    report = await racing.finish(
        host_id,
        begun.epoch,
        generation=begun.generation,
        stalls=0,
        progressed=True,
        now=datetime.now(UTC),
        jitter=0.5,
    )
    host = await pool.fetchrow("SELECT * FROM threadwarden.hosts WHERE host_id = $1", host_id)
    assert host is not None
    return begun.generation, report, dict(host)


async def test_a_mutation_between_read_and_write_makes_the_finish_decide_again(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    observed, report, host = await _finish_under_races(pool, ids, races=1)
    # The second decision saw the racing admission: nothing past the observed generation is
    # acknowledged, the new work counts and keeps the alarm armed.
    assert host["dirty"] == observed + 1 == report.generation
    assert host["processed"] <= observed < host["dirty"]
    assert host["nonterminal"] == report.nonterminal == 1
    assert host["alarm_at"] is not None and host["alarm_at"] == report.alarm_at


async def test_a_finish_raced_every_time_falls_back_to_locking_the_row(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    observed, report, host = await _finish_under_races(pool, ids, races=FINISH_TRIES + 5)
    # Each optimistic try lost a race; the finish then locked the row and wrote.
    assert host["dirty"] == observed + FINISH_TRIES
    assert host["processed"] <= observed
    assert host["alarm_at"] is not None
    assert report.generation == observed + FINISH_TRIES


@pytest.mark.parametrize("raced", [False, True], ids=["as-read", "raced-after-the-read"])
async def test_a_finish_given_the_attempts_read_writes_at_once_unless_the_host_moved(
    pool: asyncpg.Pool[Any], database_url: str, ids: str, raced: bool
) -> None:
    admissions = Admissions(pool, minimum_alarm_delay_ms=50)
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    begun = await Maintenance(pool, Timing()).begin(ids, datetime.now(UTC))
    attempts = Attempts(pool, lease_ms=30_000)
    claim = await attempts.claim_head(ids, begun.epoch, ids, bindings=BINDINGS)
    assert claim is not None
    await attempts.settle(claim, "completed", result=1)
    publications = Publications(pool, [NotifySink(pool)])
    committed = await publications.publish_committed(ids, refresh=[ids], view=True)
    assert committed.view is not None
    if raced:  # an admission commits after the attempt's read
        await admissions.admit(thread_id=ids, agent_id="echo", input={})

    async with counted_pool(database_url) as counted:
        await counted.taken()
        report = await Maintenance(counted.pool, Timing()).finish(
            ids,
            begun.epoch,
            generation=begun.generation,
            stalls=0,
            progressed=True,
            now=datetime.now(UTC),
            jitter=0.5,
            view=committed.view,
        )
        statements = await counted.taken()

    host = await pool.fetchrow("SELECT * FROM threadwarden.hosts WHERE host_id = $1", ids)
    assert host is not None
    if not raced:  # the write alone, on the attempt's read: nothing left, acknowledged
        assert len(statements) == 1, statements
        assert (host["processed"], host["nonterminal"]) == (begun.generation, 0)
    else:  # the write found the host moved: read again, the admission counts
        assert len(statements) == 3, statements
        assert host["processed"] <= begun.generation < host["dirty"]
        assert host["nonterminal"] == report.nonterminal == 1


async def test_a_finish_given_a_read_of_a_replaced_pass_raises_stale_pass(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    admissions = Admissions(pool, minimum_alarm_delay_ms=50)
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    maintenance = Maintenance(pool, Timing())
    begun = await maintenance.begin(ids, datetime.now(UTC))
    committed = await Publications(pool, [NotifySink(pool)]).publish_committed(
        ids, refresh=[ids], view=True
    )
    await maintenance.begin(ids, datetime.now(UTC))  # a newer pass

    with pytest.raises(StalePass):
        await maintenance.finish(
            ids,
            begun.epoch,
            generation=begun.generation,
            stalls=0,
            progressed=False,
            now=datetime.now(UTC),
            jitter=0.5,
            view=committed.view,
        )
