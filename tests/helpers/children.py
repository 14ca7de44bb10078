"""A parent submission and its children, driven through the ledger steps, plus a connection
that dies before its n-th statement (a crash inside a transaction)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from tests.helpers.ledger import BINDINGS, Ledger
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.children import Children
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.ledger.models import ChildReceipt, ChildSettled
from threadwarden.ledger.operator import Operator
from threadwarden.protocol.decisions import Timing
from threadwarden.views import FinalOutcome

MIN_DELAY_MS = 50


@dataclass
class Family:
    """One parent host (``{ids}-p``) and the repositories its children need."""

    ledger: Ledger
    children: Children
    parent_host: str

    @classmethod
    def on(cls, pool: asyncpg.Pool[Any], ids: str) -> Family:
        admissions = Admissions(pool, minimum_alarm_delay_ms=MIN_DELAY_MS)
        ledger = Ledger(
            pool,
            Maintenance(pool, Timing()),
            Attempts(pool, lease_ms=30_000),
            admissions,
            Operator(pool, minimum_alarm_delay_ms=MIN_DELAY_MS),
        )
        children = Children(pool, admissions, minimum_alarm_delay_ms=MIN_DELAY_MS)
        return cls(ledger, children, f"{ids}-p")

    async def parent(self) -> Claim:
        """Admit the parent and claim it (an attempt is running)."""
        await self.ledger.admit(self.parent_host)
        return await self.ledger.claim(self.parent_host)

    async def reclaim(self) -> Claim:
        """A new pass's attempt on the parent (after a wake, or recovery of a lapsed one)."""
        return await self.ledger.claim(self.parent_host)

    async def establish(self, claim: Claim, step: int, **request: Any) -> ChildReceipt:
        request.setdefault("agent_id", "echo")
        request.setdefault("input", {"task": step})
        return await self.children.establish_child(claim, step=step, **request)

    async def settle_child(
        self, child: ChildReceipt, outcome: FinalOutcome = "completed", result: Any = None
    ) -> ChildSettled:
        """The child's host runs a pass whose attempt settles the child; the settlement
        records the child-settled marker on the parent's host (returned)."""
        begun = await self.ledger.begin(child.host_id)
        claim = await self.ledger.attempts.claim_head(
            child.host_id, begun.epoch, child.thread_id, bindings=BINDINGS
        )
        assert claim is not None and claim.submission_id == child.submission_id
        marker = await self.ledger.attempts.settle(claim, outcome, result=result)
        assert marker is not None  # a child's settlement always records its marker
        return marker

    async def children_of(self, parent_submission_id: str) -> list[dict[str, Any]]:
        rows = await self.ledger.pool.fetch(
            "SELECT * FROM threadwarden.submissions WHERE parent_submission_id = $1"
            " ORDER BY parent_call_step",
            parent_submission_id,
        )
        return [dict(r) for r in rows]

    async def thread_records(self, thread_id: str) -> list[dict[str, Any]]:
        rows = await self.ledger.pool.fetch(
            "SELECT sequence, kind, body, step, submission_id FROM threadwarden.records"
            " WHERE thread_id = $1 ORDER BY sequence",
            thread_id,
        )
        return [dict(r) for r in rows]

    async def markers(self, parent_submission_id: str) -> list[dict[str, Any]]:
        rows = await self.ledger.pool.fetch(
            "SELECT child_submission_id, parent_host_id, outcome"
            "  FROM threadwarden.child_settlements WHERE parent_submission_id = $1"
            " ORDER BY child_submission_id",
            parent_submission_id,
        )
        return [dict(r) for r in rows]


class Crashed(Exception):
    """The connection's server process was terminated before a statement (a crash)."""


class CrashingConnection:
    """Forwards to a real connection; before statement number ``crash_at`` (0-based) it
    terminates the connection's server process, so the open transaction dies with it.

    ``statements`` counts what was sent (the statement count of the code under test).
    """

    def __init__(
        self, conn: asyncpg.Connection[Any], killer: asyncpg.Pool[Any], crash_at: int | None
    ) -> None:
        self._conn = conn
        self._killer = killer
        self._crash_at = crash_at
        self.statements: list[str] = []

    async def _before(self, query: str) -> None:
        if len(self.statements) == self._crash_at:
            await self._killer.execute(
                "SELECT pg_terminate_backend($1)", self._conn.get_server_pid()
            )
            raise Crashed(f"crashed before statement {self._crash_at}: {query[:60]!r}")
        self.statements.append(query)

    async def fetch(self, query: str, *args: Any) -> Any:
        await self._before(query)
        return await self._conn.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> Any:
        await self._before(query)
        return await self._conn.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        await self._before(query)
        return await self._conn.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> Any:
        await self._before(query)
        return await self._conn.execute(query, *args)
