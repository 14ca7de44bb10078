"""Brief §5 scenarios 3 and 10-18 on real Postgres: caught-up cost, stalls, backoff, failures.

Each test drives whole passes through the ledger steps (begin, recover, select, attempt, finish or
rearm_failure) with an injected clock (explicit ``now``, in ms after a fixed instant) and explicit
jitter. Admission stamps its own alarm with the database clock, which is later than the injected
clock, so alarm assertions compare only alarms written by pass steps.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from ledger.admission import Admissions
from ledger.attempts import Attempts
from ledger.maintenance import BeginResult, Maintenance, Report
from ledger.models import to_ms
from ledger.pool import _init_connection, create_pool
from ledger.projection import Projection
from ledger.records import insert_record
from tests.helpers.ledger import publish
from workflows.decisions import Timing

BINDINGS = {"echo": "digest-1"}
T0 = datetime(2026, 1, 1, tzinfo=UTC)
BASE, CAP, MIN_DELAY, WAKE_SCAN = 100, 5_000, 50, 1_000


def _at(ms: int) -> datetime:
    """The injected clock: ``ms`` milliseconds after the fixed start instant."""
    return T0 + timedelta(milliseconds=ms)


def _rel(instant: datetime | int | None) -> int:
    """Milliseconds since the fixed start instant, of a datetime or of epoch milliseconds."""
    assert instant is not None
    return (instant if isinstance(instant, int) else to_ms(instant)) - to_ms(T0)


def _bound(stalls: int) -> int:
    """b = min(cap, base·2^min(s, 30)), written out independently of the code under test."""
    return min(CAP, BASE * (1 << min(stalls, 30)))


def _alarm(host: dict[str, Any]) -> int | None:
    """The host's alarm on the injected clock, or None when cleared."""
    return None if host["alarm_at"] is None else _rel(host["alarm_at"])


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
        return await self.m.begin(self.host_id, _at(now))

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
            now=_at(now),
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
            now=_at(now),
            jitter=jitter,
            error="native step failed" if native else "auxiliary step failed",
            extra_deadline=None if aux_deadline is None else _at(aux_deadline),
        )

    async def select(self, begun: BeginResult, now: int) -> str | None:
        """Recovery, then lane selection, as the native path runs them; the selected thread."""
        await self.m.recover(self.host_id, begun.epoch)
        return (await self.m.select_lane(self.host_id, begun.epoch, _at(now))).thread_id

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
            now = _rel(report.alarm_at)
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
        heads: dict[str, str] = {}
        for s in subs:
            if s["state"] != "settled":
                heads.setdefault(s["thread_id"], s["state"])
        if any(state not in ("suspended", "unknown") for state in heads.values()):
            assert host["dirty"] > host["processed"], "autonomous work left unacknowledged"
            assert host["alarm_at"] is not None, "autonomous work left without an alarm"


@pytest.fixture
def scene(pool: asyncpg.Pool[Any], ids: str) -> Scene:
    """The test's host with default timing, a 30 s lease and a 50 ms admission floor."""
    admissions = Admissions(pool, minimum_alarm_delay_ms=MIN_DELAY)
    return Scene(
        pool, Maintenance(pool, Timing()), Attempts(pool, lease_ms=30_000), admissions, ids
    )


# --- scenario 3 -----------------------------------------------------------------------------


async def _bulk_settled(pool: asyncpg.Pool[Any], host_id: str, thread_id: str, n: int) -> None:
    """``n`` settled submissions with their settlement records (acknowledged history)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO threadwarden.hosts (host_id) VALUES ($1) ON CONFLICT DO NOTHING", host_id
        )
        await conn.execute(
            "INSERT INTO threadwarden.threads (thread_id, host_id, next_sequence, next_record,"
            " producer_epoch) VALUES ($1, $2, $3 + 1, $3 + 1, 1)",
            thread_id,
            host_id,
            n,
        )
        await conn.execute(
            "WITH s AS (INSERT INTO threadwarden.submissions (submission_id, thread_id, sequence,"
            "   idempotency_key, payload_digest, agent_id, input, state, outcome, epoch)"
            " SELECT $1::text || '-s' || g, $1, g, 'k' || g, 'd', 'echo', '{}', 'settled',"
            "        'completed', 1 FROM generate_series(1, $2::int) g RETURNING *)"
            " INSERT INTO threadwarden.records (thread_id, sequence, record_id, submission_id,"
            "   kind, body, epoch)"
            " SELECT thread_id, sequence, thread_id || ':' || sequence, submission_id,"
            "        'settlement', '{}', 1 FROM s",
            thread_id,
            n,
        )


async def _forced_caught_up_pass(
    m: Maintenance, host_id: str, now: int, statements: list[str]
) -> tuple[list[str], Report]:
    """Begin and the caught-up finish; the statements they ran, minus transaction control."""
    statements.clear()
    begun = await m.begin(host_id, _at(now))
    assert begun.caught_up
    report = await m.finish_caught_up(host_id, begun.epoch, _at(now))
    for _ in range(3):  # query loggers are called with loop.call_soon
        await asyncio.sleep(0)
    control = ("BEGIN", "COMMIT", "ROLLBACK", "SELECT pg_advisory_unlock_all()")  # + pool reset
    return [" ".join(s.split()) for s in statements if not s.startswith(control)], report


async def test_scenario_03_caught_up_pass_runs_constant_sql_and_clears_the_alarm(
    database_url: str, scene: Scene
) -> None:
    await scene.admit()
    _, report = await scene.native_pass(0, settle=True, jitter=0.5)
    assert (report.processed, report.alarm_at) == (report.generation, None)

    statements: list[str] = []

    async def init(conn: asyncpg.Connection[Any]) -> None:
        await _init_connection(conn)
        conn.add_query_logger(lambda query: statements.append(query.query))

    counted = await asyncpg.create_pool(database_url, min_size=1, max_size=1, init=init)
    assert counted is not None
    try:
        logged, ids = Maintenance(counted, Timing()), scene.host_id
        small, small_report = await _forced_caught_up_pass(logged, ids, 1_000, statements)

        await _bulk_settled(scene.pool, ids, f"{ids}-history", 150)
        await _bulk_settled(scene.pool, f"{ids}-other", f"{ids}-other-history", 75)
        for n in range(75):
            await scene.admissions.admit(thread_id=f"{ids}-other", agent_id="echo", input=n)
        assert await scene.pool.fetchval("SELECT count(*) FROM threadwarden.submissions") >= 300
        large, large_report = await _forced_caught_up_pass(logged, ids, 2_000, statements)
    finally:
        await counted.close()

    assert small == large, (small, large)  # the same statements, whatever the ledger holds
    assert len(small) <= 6, small  # begin: ensure, lock, pre-arm; finish: lock, set
    # Only the host row is locked and written; the outbox deadlines it reads beside it are
    # index minimums (the same statements above, however large the ledger).
    assert all("threadwarden.hosts" in s for s in small), "only the host row is touched"
    touched = [s for s in small if re.search(r"\b(submissions|threads|records)\b", s)]
    assert touched == [], "a caught-up pass must not scan the ledger or read history"
    assert [r.outcome for r in (small_report, large_report)] == ["caught-up"] * 2
    assert small_report.alarm_at is None and large_report.alarm_at is None
    host = await scene.host()
    assert (host["alarm_at"], host["processed"]) == (None, host["dirty"])
    await scene.check()


# --- scenario 10 ----------------------------------------------------------------------------


async def test_scenario_10_missing_record_runs_one_bootstrap_pass(scene: Scene) -> None:
    query = "SELECT 1 FROM threadwarden.hosts WHERE host_id = $1"
    assert await scene.pool.fetchval(query, scene.host_id) is None

    begun = await scene.begin(0)

    assert (begun.generation, begun.caught_up, begun.stalls) == (1, False, 0)
    host = await scene.host()
    assert (host["dirty"], host["processed"]) == (1, 0)
    assert _alarm(host) == MIN_DELAY  # begin pre-arms now + minDelay
    assert await scene.select(begun, 0) is None
    report = await scene.finish(begun, 0, progressed=False, jitter=0.5)
    assert (report.outcome, report.processed, report.alarm_at) == ("actionable", 1, None)

    again = await scene.begin(1_000)  # only one actionable pass
    assert again.caught_up
    cleared = await scene.m.finish_caught_up(scene.host_id, again.epoch, _at(1_000))
    assert cleared.alarm_at is None
    host = await scene.host()
    assert (host["dirty"], host["processed"], host["retry"]) == (1, 1, None)
    await scene.check()


# --- scenarios 11 and 12: stalls and their persistence --------------------------------------

JITTERS = (0.0, 0.5, 0.99999)


async def test_scenario_11_stalls_back_off_100_to_5000_and_cap_at_30(scene: Scene) -> None:
    await scene.admit()
    now, bounds = 0, []
    for stalls in range(33):
        jitter = JITTERS[stalls % len(JITTERS)]
        begun, report = await scene.native_pass(now, settle=False, jitter=jitter)

        assert begun.stalls == min(30, stalls)
        b = _bound(stalls)
        bounds.append(b)
        host = await scene.host()
        delay = _rel(host["retry"]["not_before"]) - now
        assert math.ceil(b / 2) <= delay <= b
        assert delay == {0.0: math.ceil(b / 2), 0.5: math.ceil(3 * b / 4), 0.99999: b}[jitter]
        assert host["retry"] == {
            "generation": begun.generation,
            "not_before": to_ms(_at(now + delay)),
            "native_only": True,
            "stalls": min(30, stalls + 1),
        }
        assert _alarm(host) == now + delay == _rel(report.alarm_at)
        await scene.check()
        now += delay  # the next pass runs when the alarm fires

    assert bounds[:8] == [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000]
    assert set(bounds[6:]) == {5_000}


async def test_scenario_12_stalls_persist_across_eviction(database_url: str, scene: Scene) -> None:
    await scene.admit()
    now = await scene.stall([0.0, 0.0, 0.0])
    assert (await scene.host())["retry"]["stalls"] == 3

    evicted = await create_pool(database_url, max_size=2)  # a new incarnation: no memory kept
    try:
        fresh = Maintenance(evicted, Timing())
        fresh_scene = Scene(
            evicted, fresh, Attempts(evicted, lease_ms=30_000), scene.admissions, scene.host_id
        )
        begun, _ = await fresh_scene.native_pass(now, settle=False, jitter=0.0)
    finally:
        await evicted.close()

    assert begun.stalls == 3
    host = await scene.host()
    assert host["retry"]["stalls"] == 4
    assert _alarm(host) == now + math.ceil(_bound(3) / 2)  # 400 ms, not 50 as after a reset
    await scene.check()


# --- scenarios 13-15: the retry window ------------------------------------------------------


async def test_scenario_13_alarm_inside_an_open_retry_window_is_caught_up(scene: Scene) -> None:
    await scene.admit()
    await scene.stall([0.0, 0.0, 0.0, 0.99999])  # last window: 800 ms
    before = await scene.host()
    not_before = _rel(before["retry"]["not_before"])
    producer_epoch = "SELECT producer_epoch FROM threadwarden.threads WHERE thread_id = $1"
    claimed = await scene.pool.fetchval(producer_epoch, scene.host_id)

    # Early alarms: far from notBefore it wins; within minDelay of it the floor wins.
    for early in (not_before - 500, not_before - 20):
        armed = _alarm(await scene.host())
        assert armed is not None
        begun = await scene.begin(early)
        assert (begun.caught_up, begun.stalls) == (True, 4)
        # begin's pre-arm is an ensure-by: it keeps an earlier alarm
        assert _alarm(await scene.host()) == min(armed, early + MIN_DELAY)
        report = await scene.m.finish_caught_up(scene.host_id, begun.epoch, _at(early))

        assert report.outcome == "caught-up"
        assert _rel(report.alarm_at) == max(early + MIN_DELAY, not_before)
        host = await scene.host()
        assert _alarm(host) == max(early + MIN_DELAY, not_before)
        assert host["retry"] == before["retry"]
        assert (host["dirty"], host["processed"]) == (before["dirty"], before["processed"])
        await scene.check()

    # No native work ran inside the window: the head was never claimed again.
    assert await scene.pool.fetchval(producer_epoch, scene.host_id) == claimed
    assert not (await scene.begin(not_before)).caught_up


AUX_SOURCES = ("host", "publication", "message", "projection")


async def set_aux_deadline(scene: Scene, source: str, at: int) -> int | None:
    """Make ``source`` the host's one auxiliary deadline, due at ``at``; returns the deadline to
    pass as the host plug-in's (``extra_deadline``), or None when it lives in the ledger."""
    pool, host = scene.pool, scene.host_id
    if source == "host":
        return at
    if source == "projection":
        await pool.execute(
            "UPDATE threadwarden.hosts SET projection_due_at = $2 WHERE host_id = $1", host, _at(at)
        )
    elif source == "message":
        await pool.execute(
            "INSERT INTO threadwarden.messages (message_id, source_host_id, source_thread_id,"
            " source_submission_id, destination_thread_id, agent_id, input, not_before)"
            " VALUES ($1, $1, $1, 'sub_x', 'elsewhere', 'echo', '{}', $2)"
            " ON CONFLICT (message_id) DO UPDATE SET not_before = EXCLUDED.not_before",
            host,
            _at(at),
        )
    else:
        async with pool.acquire() as conn, conn.transaction():
            if not await conn.fetchval(
                "SELECT count(*) FROM threadwarden.publications WHERE host_id = $1", host
            ):
                submission = await conn.fetchval(
                    "SELECT submission_id FROM threadwarden.submissions WHERE thread_id = $1", host
                )
                await insert_record(
                    conn, thread_id=host, submission_id=submission, kind="note", body={}, epoch=0
                )
            await conn.execute(
                "UPDATE threadwarden.publications SET not_before = $2 WHERE host_id = $1",
                host,
                _at(at),
            )
    return None


@pytest.mark.parametrize("source", AUX_SOURCES)
async def test_scenario_13_aux_deadline_inside_the_window_pulls_the_alarm(
    scene: Scene, source: str
) -> None:
    """Inside an open window the alarm is max(now + minDelay, min(notBefore, aux deadline)),
    whichever auxiliary work the deadline belongs to."""
    await scene.admit()
    await scene.stall([0.0, 0.0, 0.0, 0.99999])  # last window: 800 ms
    not_before = _rel((await scene.host())["retry"]["not_before"])
    early = not_before - 500
    for aux, expected in (
        (early + 200, early + 200),  # an aux deadline before notBefore wins
        (early + 10, early + MIN_DELAY),  # never earlier than now + minDelay
        (not_before + 300, not_before),  # a later aux deadline: notBefore
    ):
        extra = await set_aux_deadline(scene, source, aux)
        begun = await scene.begin(early)
        assert begun.caught_up
        report = await scene.m.finish_caught_up(
            scene.host_id,
            begun.epoch,
            _at(early),
            extra_deadline=None if extra is None else _at(extra),
        )
        assert _rel(report.alarm_at) == _alarm(await scene.host()) == expected
        await scene.check()


async def test_scenario_14_mutation_in_the_window_obsoletes_the_retry(scene: Scene) -> None:
    await scene.admit()
    await scene.stall([0.0] * 5)
    window = await scene.host()
    assert window["retry"]["stalls"] == 5
    not_before = _rel(window["retry"]["not_before"])  # an 800 ms window

    # The mutation races an early, caught-up pass, which must not park the new generation
    # behind the obsolete window. The brief's caught-up finish would set now + wakeScanInterval;
    # SPEC §2 wins: a racing commit is never postponed, its alarm is now + minDelay.
    early = not_before - 600
    begun = await scene.begin(early)
    assert begun.caught_up
    await scene.admit(during="pass")
    raced = await scene.m.finish_caught_up(
        scene.host_id, begun.epoch, _at(early), generation=begun.generation
    )
    assert _rel(raced.alarm_at) == early + MIN_DELAY
    assert (await scene.host())["dirty"] == begun.generation + 1
    await scene.check()

    # The mutation's wake starts the next pass at once, still inside the old window.
    inside = early + MIN_DELAY
    begun, _ = await scene.native_pass(inside, settle=False, jitter=0.0)
    assert inside < not_before
    assert (begun.caught_up, begun.stalls, begun.generation) == (False, 0, window["dirty"] + 1)
    host = await scene.host()
    assert (host["retry"]["generation"], host["retry"]["stalls"]) == (begun.generation, 1)
    assert _alarm(host) == inside + math.ceil(_bound(0) / 2)
    await scene.check()

    # A mutation between passes, inside the fresh window, obsoletes it just the same.
    await scene.admit(during="window")
    again = await scene.begin(inside + 10)
    assert _rel(host["retry"]["not_before"]) > inside + 10
    assert (again.caught_up, again.stalls, again.generation) == (False, 0, begun.generation + 1)


async def test_scenario_15_progress_drops_the_retry_and_rearms_at_base(scene: Scene) -> None:
    for n in range(3):
        await scene.admit(n=n)
    now = await scene.stall([0.99999])
    assert (await scene.host())["retry"]["stalls"] == 1

    # Progress by settlement: retry removed, alarm exactly base after now, work remains.
    begun, settled = await scene.native_pass(now, settle=True, jitter=0.9)
    assert begun.stalls == 1
    host = await scene.host()
    assert host["retry"] is None
    assert _alarm(host) == _rel(settled.alarm_at) == now + BASE
    assert host["processed"] < host["dirty"]
    await scene.check()

    # Progress by a repaired report: the attempt of a stalled pass "crashes" holding the head
    # (neither settled nor released); once its lease lapses, recovery returns it to ready.
    now += BASE
    begun = await scene.begin(now)
    assert await scene.select(begun, now) == scene.host_id
    claim = await scene.attempts.claim_head(
        scene.host_id, begun.epoch, scene.host_id, bindings=BINDINGS
    )
    assert claim is not None
    await scene.finish(begun, now, progressed=False, jitter=0.0)
    assert (await scene.host())["retry"]["stalls"] == 1
    await scene.pool.execute(
        "UPDATE threadwarden.submissions SET lease_expires_at = clock_timestamp() - interval '1 s'"
        " WHERE submission_id = $1",
        claim.submission_id,
    )
    now += MIN_DELAY
    begun = await scene.begin(now)
    assert (begun.caught_up, begun.stalls) == (False, 1)
    repaired = (await scene.m.recover(scene.host_id, begun.epoch)).repaired
    assert repaired == 1
    report = await scene.finish(begun, now, progressed=repaired > 0, jitter=0.99999)
    host = await scene.host()
    assert host["retry"] is None
    assert _alarm(host) == _rel(report.alarm_at) == now + BASE
    await scene.check()


# --- scenarios 16-18: failures --------------------------------------------------------------


async def test_scenario_16_native_failure_backs_off_monotonically(scene: Scene) -> None:
    await scene.admit()
    now, previous = 0, 0
    for failures in range(8):
        jitter = 0.99 if failures % 2 == 0 else 0.0
        begun = await scene.begin(now)
        assert (begun.caught_up, begun.stalls) == (False, failures)
        report = await scene.fail(begun, now, jitter=jitter)  # e.g. recovery raised

        host = await scene.host()
        b = _bound(failures)
        not_before = _rel(host["retry"]["not_before"])
        assert not_before == now + math.ceil(b / 2 + b / 2 * jitter) > previous
        assert (host["retry"]["native_only"], host["retry"]["stalls"]) == (True, failures + 1)
        assert _alarm(host) == _rel(report.alarm_at) == not_before  # no aux deadline, no race
        assert (host["last_outcome"], host["last_error"]) == ("failed", "native step failed")
        await scene.check()
        previous = now = not_before

    # At the cap, a second failure in the same window with jitter 0 after 0.99 (4975 ms, then
    # 2500 ms) must not pull notBefore earlier.
    begun = await scene.begin(now)
    assert begun.stalls == 8
    seen = []
    for jitter in (0.99, 0.0):
        await scene.fail(begun, now, jitter=jitter)
        host = await scene.host()
        seen.append((_rel(host["retry"]["not_before"]), _alarm(host), host["retry"]["stalls"]))
    assert seen == [(now + 4_975, now + 4_975, 9), (now + 4_975, now + 4_975, 10)]


async def test_scenario_17_auxiliary_failure_records_native_only_false(scene: Scene) -> None:
    await scene.admit()
    await scene.stall([0.99999] * 4)
    window = await scene.host()
    not_before = _rel(window["retry"]["not_before"])  # stalls 4: a 1600 ms window

    # Aux work fails on an early, caught-up alarm: the window only grows, never shrinks.
    early = not_before - 1_500
    begun = await scene.begin(early)
    assert begun.caught_up
    await scene.fail(begun, early, jitter=0.0, native=False)  # e.g. the host drain failed
    host = await scene.host()
    assert host["retry"] == {
        "generation": begun.generation,
        "not_before": to_ms(_at(max(not_before, early + math.ceil(_bound(4) / 2)))),
        "native_only": False,
        "stalls": 5,
    }
    assert _alarm(host) == _rel(host["retry"]["not_before"]) >= not_before
    await scene.check()

    # The final transaction fails after the native work: nativeOnly is false again.
    now = _rel(host["retry"]["not_before"])
    begun = await scene.begin(now)
    assert (begun.caught_up, begun.stalls) == (False, 5)
    assert await scene.select(begun, now) == scene.host_id
    await scene.fail(begun, now, jitter=0.0, native=False)  # the final transaction failed
    host = await scene.host()
    assert (host["retry"]["native_only"], host["retry"]["stalls"]) == (False, 6)
    assert _alarm(host) == _rel(host["retry"]["not_before"]) == now + math.ceil(_bound(5) / 2)
    assert host["processed"] == window["processed"]
    await scene.check()


@pytest.mark.parametrize("source", AUX_SOURCES)
async def test_scenario_16_native_failure_honours_a_due_aux_deadline(
    scene: Scene, source: str
) -> None:
    """After a native failure independent aux deadlines still fire, even ones already due."""
    await scene.admit()
    extra = await set_aux_deadline(scene, source, 900)  # already due
    begun = await scene.begin(1_000)
    report = await scene.fail(begun, 1_000, jitter=0.5, aux_deadline=extra)
    host = await scene.host()
    assert host["retry"]["native_only"] is True
    assert _rel(host["retry"]["not_before"]) == 1_000 + math.ceil(_bound(0) * 0.75)
    assert _rel(report.alarm_at) == _alarm(host) == 1_000 + MIN_DELAY
    await scene.check()


@pytest.mark.parametrize("source", AUX_SOURCES)
async def test_scenario_17_auxiliary_failure_ignores_a_due_aux_deadline(
    scene: Scene, source: str
) -> None:
    """After an auxiliary failure a due (possibly broken) aux deadline cannot pull the alarm
    before notBefore; a future one before notBefore still does."""
    await scene.admit()
    extra = await set_aux_deadline(scene, source, 900)
    begun = await scene.begin(1_000)
    await scene.fail(begun, 1_000, jitter=0.99, native=False, aux_deadline=extra)
    host = await scene.host()
    not_before = _rel(host["retry"]["not_before"])
    assert host["retry"]["native_only"] is False and not_before == 1_000 + math.ceil(99.5)
    assert _alarm(host) == not_before
    extra = await set_aux_deadline(scene, source, not_before + 60)
    begun = await scene.begin(not_before)
    await scene.fail(begun, not_before, jitter=0.99, native=False, aux_deadline=extra)
    host = await scene.host()
    assert _rel(host["retry"]["not_before"]) > not_before + 60
    assert _alarm(host) == not_before + 60
    await scene.check()


async def test_scenario_18_failure_after_dirty_moved_rearms_at_the_floor(scene: Scene) -> None:
    await scene.admit()
    now = 0
    for _ in range(3):  # earlier failures: without a racing mutation the alarm would be later
        begun = await scene.begin(now)
        now = _rel((await scene.fail(begun, now, jitter=0.5)).alarm_at)

    begun = await scene.begin(now)
    assert (begun.caught_up, begun.stalls) == (False, 3)
    await scene.admit(racing=True)
    report = await scene.fail(begun, now, jitter=0.99)

    host = await scene.host()
    assert host["dirty"] == begun.generation + 1
    assert (host["retry"]["generation"], host["retry"]["stalls"]) == (begun.generation, 4)
    assert _alarm(host) == _rel(report.alarm_at) == now + MIN_DELAY  # not notBefore
    assert _rel(host["retry"]["not_before"]) > now + MIN_DELAY
    await scene.check()

    next_pass = await scene.begin(now + MIN_DELAY)  # the retry is obsolete
    assert (next_pass.caught_up, next_pass.stalls) == (False, 0)
    assert next_pass.generation == begun.generation + 1
