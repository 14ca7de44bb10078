"""A host driven pass by pass through the ledger steps, on an injected clock.

`Scene` runs begin, recovery, selection, an attempt, finish or rearm_failure with an explicit
``now`` (ms after a fixed instant) and explicit jitter, as the pass would; the helpers convert
between that clock and instants. Admission stamps its own alarm with the database clock, which
is later than the injected clock, so alarm assertions compare only alarms written by pass steps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from tests.helpers.ledger import publish
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.maintenance import BeginResult, Maintenance
from threadwarden.ledger.models import to_ms
from threadwarden.ledger.projection import Projection
from threadwarden.protocol.passes import PassReport as Report

BINDINGS = {"echo": "digest-1"}
T0 = datetime(2026, 1, 1, tzinfo=UTC)
BASE, CAP, MIN_DELAY, WAKE_SCAN = 100, 5_000, 50, 1_000


def at(ms: int) -> datetime:
    """The injected clock: ``ms`` milliseconds after the fixed start instant."""
    return T0 + timedelta(milliseconds=ms)


def rel(instant: datetime | int | None) -> int:
    """Milliseconds since the fixed start instant, of a datetime or of epoch milliseconds."""
    assert instant is not None
    return (instant if isinstance(instant, int) else to_ms(instant)) - to_ms(T0)


def bound(stalls: int) -> int:
    """b = min(cap, base·2^min(s, 30)), written out independently of the code under test."""
    return min(CAP, BASE * (1 << min(stalls, 30)))


def alarm_of(host: dict[str, Any]) -> int | None:
    """The host's alarm on the injected clock, or None when cleared."""
    return None if host["alarm_at"] is None else rel(host["alarm_at"])


@dataclass
class Scene:
    """One host (id ``host_id``) and the ledger steps that drive its passes."""

    pool: asyncpg.Pool[Any]
    m: Maintenance
    attempts: Attempts
    admissions: Admissions
    host_id: str

    async def admit(self, **value: Any) -> None:
        await self.admissions.admit(thread_id=self.host_id, agent_id="echo", input=value)

    async def host(self) -> dict[str, Any]:
        row = await self.pool.fetchrow(
            "SELECT * FROM threadwarden.hosts WHERE host_id = $1", self.host_id
        )
        assert row is not None, f"host {self.host_id} missing"
        return dict(row)

    async def begin(self, now: int) -> BeginResult:
        return await self.m.begin(self.host_id, at(now))

    async def finish(
        self, begun: BeginResult, now: int, *, progressed: bool, jitter: float
    ) -> Report:
        # As the pass's auxiliary work and the attempt's best-effort steps do before finish.
        await publish(self.pool, self.host_id)
        await Projection(self.pool).backfill(self.host_id)
        return await self.m.finish(
            self.host_id,
            begun.epoch,
            generation=begun.generation,
            stalls=begun.stalls,
            progressed=progressed,
            now=at(now),
            jitter=jitter,
        )

    async def fail(
        self,
        begun: BeginResult,
        now: int,
        *,
        jitter: float,
        native: bool = True,
        aux_deadline: int | None = None,
    ) -> Report:
        return await self.m.rearm_failure(
            self.host_id,
            begun.epoch,
            generation=begun.generation,
            native_only=native,
            now=at(now),
            jitter=jitter,
            error="native step failed" if native else "auxiliary step failed",
            extra_deadline=None if aux_deadline is None else at(aux_deadline),
        )

    async def select(self, begun: BeginResult, now: int) -> str | None:
        """Recovery, then lane selection, as the native path runs them; the selected thread."""
        await self.m.recover(self.host_id, begun.epoch)
        return (await self.m.select_lane(self.host_id, begun.epoch, at(now))).thread_id

    async def native_pass(
        self, now: int, *, settle: bool, jitter: float
    ) -> tuple[BeginResult, Report]:
        """An actionable pass; its attempt settles the head or gives it back (a stall)."""
        begun = await self.begin(now)
        assert not begun.caught_up
        assert await self.select(begun, now) == self.host_id
        claim = await self.attempts.claim_head(
            self.host_id, begun.epoch, self.host_id, bindings=BINDINGS
        )
        assert claim is not None
        if settle:
            await self.attempts.settle(claim, "completed", result={"ok": True})
        else:
            await self.attempts.release(claim)
        return begun, await self.finish(begun, now, progressed=settle, jitter=jitter)

    async def stall(self, jitters: list[float]) -> int:
        """Stalled passes from time 0, each when the previous alarm fires; the last alarm."""
        now = 0
        for jitter in jitters:
            _, report = await self.native_pass(now, settle=False, jitter=jitter)
            now = rel(report.alarm_at)
        return now

    async def check(self) -> None:
        """Brief §5 preamble: one settlement each, FIFO, fenced epochs, armed leftovers."""
        host, pool = await self.host(), self.pool
        subs = await pool.fetch(
            "SELECT s.* FROM threadwarden.submissions s JOIN threadwarden.threads t"
            " USING (thread_id) WHERE t.host_id = $1 ORDER BY s.thread_id, s.sequence",
            self.host_id,
        )
        records = await pool.fetch(
            "SELECT r.*, t.producer_epoch FROM threadwarden.records r JOIN threadwarden.threads t"
            " USING (thread_id) WHERE t.host_id = $1 ORDER BY r.thread_id, r.sequence",
            self.host_id,
        )
        settled = [r for r in records if r["kind"] == "settlement"]
        counts = Counter(r["submission_id"] for r in settled)
        assert all(counts[s["submission_id"]] == (s["state"] == "settled") for s in subs)
        assert len({r["record_id"] for r in records}) == len(records)
        assert all(r["epoch"] <= r["producer_epoch"] for r in records)
        sequence = {s["submission_id"]: s["sequence"] for s in subs}
        for thread in {r["thread_id"] for r in records}:
            epochs = [r["epoch"] for r in records if r["thread_id"] == thread]
            assert epochs == sorted(epochs), f"{thread}: a write under an older epoch"
            order = [sequence[r["submission_id"]] for r in settled if r["thread_id"] == thread]
            assert order == sorted(order), f"{thread}: settled out of queue order"
        assert_leftovers_armed(host, subs)


def assert_leftovers_armed(host: dict[str, Any], subs: Sequence[Mapping[str, Any]]) -> None:
    """Autonomous leftovers (a head that is not a stable wait) keep the host dirty and armed."""
    heads: dict[str, str] = {}
    for s in subs:
        if s["state"] != "settled":
            heads.setdefault(s["thread_id"], s["state"])
    if any(state not in ("suspended", "unknown") for state in heads.values()):
        assert host["dirty"] > host["processed"], "autonomous work left unacknowledged"
        assert host["alarm_at"] is not None, "autonomous work left without an alarm"
