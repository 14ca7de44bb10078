"""A parent submission and its children, driven through the ledger steps, plus a connection
that dies before its n-th statement (a crash inside a transaction)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg

from tests.helpers.ledger import BINDINGS, Ledger
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.children import Children
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.ledger.models import ChildReceipt, ChildSettled, ChildWait
from threadwarden.ledger.operator import Operator
from threadwarden.ledger.pool import _init_connection
from threadwarden.ledger.recovery import Recovery
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

    async def waiting_parent(self, children: int) -> tuple[Claim, list[ChildReceipt], ChildWait]:
        """The parent establishes ``children`` children (at steps 1, 2, …) and suspends to wait
        for them all: the parent's claim, the children and the wait."""
        parent = await self.parent()
        established = [await self.establish(parent, step) for step in range(1, children + 1)]
        wait = await self.children.suspend_for_children(
            parent, [child.submission_id for child in established]
        )
        return parent, established, wait

    async def ask_approval(self, claim: Claim, reason: str, step: int = 9) -> None:
        """The attempt records an approval request and stops: the submission waits for a
        person."""
        await self.ledger.attempts.append(
            claim, "approval-requested", {"reason": reason}, step=step
        )
        await self.ledger.attempts.stop(claim, "suspended")

    async def rerun(self, parent: Claim) -> tuple[Recovery, Claim]:
        """The parent's worker died: its lease lapses, and a new pass recovers the parent and
        claims it again. What recovery did, and the new claim."""
        await self.ledger.lapse(parent.submission_id)
        begun = await self.ledger.begin(self.parent_host)
        recovery = await self.ledger.maintenance.recover(self.parent_host, begun.epoch)
        rerun = await self.ledger.attempts.claim_head(
            self.parent_host, begun.epoch, self.parent_host, bindings=BINDINGS
        )
        assert rerun is not None
        return recovery, rerun

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
        return await self._rows(
            "SELECT * FROM threadwarden.submissions WHERE parent_submission_id = $1"
            " ORDER BY parent_call_step",
            parent_submission_id,
        )

    async def thread_records(self, thread_id: str) -> list[dict[str, Any]]:
        return await self._rows(
            "SELECT sequence, kind, body, step, submission_id FROM threadwarden.records"
            " WHERE thread_id = $1 ORDER BY sequence",
            thread_id,
        )

    async def markers(self, parent_submission_id: str) -> list[dict[str, Any]]:
        return await self._rows(
            "SELECT child_submission_id, parent_host_id, outcome"
            "  FROM threadwarden.child_settlements WHERE parent_submission_id = $1"
            " ORDER BY child_submission_id",
            parent_submission_id,
        )

    async def _rows(self, query: str, key: str) -> list[dict[str, Any]]:
        return [dict(r) for r in await self.ledger.pool.fetch(query, key)]


class Crashed(Exception):
    """The connection's server process was terminated before a statement (a crash)."""


class CrashingConnection:
    """Forwards to a real connection; before statement number ``crash_at`` (0-based) it
    terminates the connection's server process, so the open transaction dies with it.

    ``statements`` counts what was sent (the statement count of the code under test) through
    the four methods that send one; the rest (``transaction()``) is the connection's own.
    """

    SENDING = frozenset({"fetch", "fetchrow", "fetchval", "execute"})

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

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._conn, name)
        if name not in self.SENDING:
            return attribute
        send: Callable[..., Awaitable[Any]] = attribute

        async def counted(query: str, *args: Any) -> Any:
            await self._before(query)
            return await send(query, *args)

        return counted


@asynccontextmanager
async def crashing_connection(
    database_url: str, killer: asyncpg.Pool[Any], crash_at: int | None
) -> AsyncIterator[CrashingConnection]:
    """A new connection, set up as the pool's are, that crashes before statement ``crash_at``
    (None: never, it only counts); terminated on the way out."""
    raw = await asyncpg.connect(database_url)
    await _init_connection(raw)
    try:
        yield CrashingConnection(raw, killer, crash_at)
    finally:
        raw.terminate()
