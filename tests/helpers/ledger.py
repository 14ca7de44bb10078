"""A ledger-level harness: the repositories of one test database plus row snapshots."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.maintenance import BeginResult, Maintenance
from threadwarden.ledger.operator import Operator
from threadwarden.ledger.publication import Publications
from threadwarden.ledger.records import insert_record
from threadwarden.protocol.decisions import Timing
from threadwarden.protocol.passes import PassReport

BINDINGS = {"echo": "digest-1"}
"""The one binding the ledger tests claim with."""


def now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Ledger:
    """The repositories on one pool, and reads of the rows they write."""

    pool: asyncpg.Pool[Any]
    maintenance: Maintenance
    attempts: Attempts
    admissions: Admissions
    operator: Operator

    @classmethod
    def defaults(cls, pool: asyncpg.Pool[Any]) -> Ledger:
        """The repositories with the default timing, a 30 s lease and a 50 ms alarm floor."""
        return cls(
            pool=pool,
            maintenance=Maintenance(pool, Timing()),
            attempts=Attempts(pool, lease_ms=30_000),
            admissions=Admissions(pool, minimum_alarm_delay_ms=50),
            operator=Operator(pool, minimum_alarm_delay_ms=50),
        )

    async def admit(self, host_id: str, thread_id: str | None = None) -> str:
        """Admit an ``echo`` submission onto ``thread_id`` (default: the host's own thread)."""
        receipt = await self.admissions.admit(
            thread_id=thread_id or host_id, agent_id="echo", input={}, host_id=host_id
        )
        return receipt.submission_id

    async def begin(self, host_id: str) -> BeginResult:
        return await self.maintenance.begin(host_id, now())

    async def claim(self, host_id: str, thread_id: str | None = None) -> Claim:
        """Begin a pass and claim the thread's head in it."""
        begun = await self.begin(host_id)
        claim = await self.attempts.claim_head(
            host_id, begun.epoch, thread_id or host_id, bindings=BINDINGS
        )
        assert claim is not None, f"head of {thread_id or host_id} not claimable"
        return claim

    async def finish(
        self,
        host_id: str,
        begun: BeginResult,
        *,
        progressed: bool = False,
        jitter: float = 0.0,
        at: datetime | None = None,
    ) -> PassReport:
        """Finish the pass ``begun`` opened, with the generation and stalls it observed."""
        return await self.maintenance.finish(
            host_id,
            begun.epoch,
            generation=begun.generation,
            stalls=begun.stalls,
            progressed=progressed,
            now=at or now(),
            jitter=jitter,
        )

    async def suspend(self, submission_id: str) -> None:
        """Make the submission a stable wait (an approval wait, set by SQL)."""
        await self.pool.execute(
            "UPDATE threadwarden.submissions SET state = 'suspended' WHERE submission_id = $1",
            submission_id,
        )

    async def lapse(self, submission_id: str) -> None:
        """Let the attempt's lease run out (the worker holding it died)."""
        await self.pool.execute(
            "UPDATE threadwarden.submissions"
            "   SET lease_expires_at = clock_timestamp() - interval '1 s'"
            " WHERE submission_id = $1",
            submission_id,
        )

    async def alarm_in(self, host_id: str, interval: str | None) -> None:
        """Set the host's alarm ``interval`` (``'-1 minute'``: overdue) from the database's
        clock, or disarm it (None)."""
        await self.pool.execute(
            "UPDATE threadwarden.hosts SET alarm_at = clock_timestamp() + $2::text::interval"
            " WHERE host_id = $1",
            host_id,
            interval,
        )

    async def quiet(self, host_id: str) -> None:
        """Make the host caught up with no alarm, so a mutation's pre-arm is visible."""
        await self.pool.execute(
            "UPDATE threadwarden.hosts SET processed = dirty, alarm_at = NULL, retry = NULL"
            " WHERE host_id = $1",
            host_id,
        )

    async def row(self, submission_id: str) -> dict[str, Any]:
        row = await self.pool.fetchrow(
            "SELECT * FROM threadwarden.submissions WHERE submission_id = $1", submission_id
        )
        assert row is not None, f"submission {submission_id} missing"
        return dict(row)

    async def host(self, host_id: str) -> dict[str, Any]:
        row = await self.pool.fetchrow(
            "SELECT * FROM threadwarden.hosts WHERE host_id = $1", host_id
        )
        assert row is not None, f"host {host_id} missing"
        return dict(row)

    async def records(self, submission_id: str) -> list[dict[str, Any]]:
        rows = await self.pool.fetch(
            "SELECT kind, body, step, epoch FROM threadwarden.records"
            " WHERE submission_id = $1 ORDER BY sequence",
            submission_id,
        )
        return [dict(r) for r in rows]

    async def settlements(self, submission_id: str) -> list[dict[str, Any]]:
        return [r for r in await self.records(submission_id) if r["kind"] == "settlement"]

    async def snapshot(self, host_id: str) -> dict[str, list[dict[str, Any]]]:
        """Every row of the host: a write that must change nothing compares equal."""
        tables = {
            "hosts": "SELECT * FROM threadwarden.hosts WHERE host_id = $1",
            "threads": "SELECT * FROM threadwarden.threads WHERE host_id = $1 ORDER BY thread_id",
            "submissions": "SELECT s.* FROM threadwarden.submissions s"
            " JOIN threadwarden.threads t USING (thread_id) WHERE t.host_id = $1"
            " ORDER BY s.submission_id",
            "records": "SELECT r.* FROM threadwarden.records r"
            " JOIN threadwarden.threads t USING (thread_id) WHERE t.host_id = $1"
            " ORDER BY r.thread_id, r.sequence",
        }
        return {
            name: [dict(r) for r in await self.pool.fetch(sql, host_id)]
            for name, sql in tables.items()
        }


async def append_settlement(ledger: Ledger, thread_id: str, submission_id: str, epoch: int) -> None:
    """Write settlement step 2 (the record) without step 3 (finalize), as a crash would leave it."""
    async with ledger.pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "SELECT 1 FROM threadwarden.threads WHERE thread_id = $1 FOR UPDATE", thread_id
        )
        await insert_record(
            conn,
            thread_id=thread_id,
            submission_id=submission_id,
            kind="settlement",
            body={"outcome": "completed", "result": {"answer": 42}, "reason": None},
            epoch=epoch,
        )


async def explain(pool: asyncpg.Pool[Any], query: str, *args: object) -> str:
    """The plan of ``query`` with sequential scans disabled: an index it can use shows in it."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        rows = await conn.fetch(f"EXPLAIN {query}", *args)
    return "\n".join(r[0] for r in rows)


async def publish(pool: asyncpg.Pool[Any], host_id: str) -> None:
    """Drain the host's publication outbox, as the finish activities do before finishing."""
    await Publications(pool, []).drain(host_id)
