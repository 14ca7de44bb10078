"""Brief §5 scenarios 3 and 10-18 on real Postgres: caught-up cost, stalls, backoff, failures.

Each test drives whole passes through the ledger steps with an injected clock and explicit
jitter (`tests.helpers.scene`). The auxiliary-deadline halves of 13, 16 and 17 are in
test_scenarios_aux_deadlines.py.
"""

from __future__ import annotations

import asyncio
import math
import re
from datetime import datetime
from typing import Any

import asyncpg

from tests.helpers.scene import BASE, BINDINGS, MIN_DELAY, Scene, alarm_of, at, bound, rel
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.maintenance import BEGIN, Maintenance
from threadwarden.ledger.models import to_ms
from threadwarden.ledger.pool import _init_connection, create_pool
from threadwarden.protocol.decisions import Timing
from threadwarden.protocol.passes import PassReport as Report

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
    begun = await m.begin(host_id, at(now))
    assert begun.caught_up
    report = await m.finish_caught_up(host_id, begun.epoch, at(now))
    for _ in range(3):  # query loggers are called with loop.call_soon
        await asyncio.sleep(0)
    control = ("BEGIN", "COMMIT", "ROLLBACK", "SELECT pg_advisory_unlock_all()")  # + pool reset
    return [" ".join(s.split()) for s in statements if not s.startswith(control)], report


async def _heads_executed(pool: asyncpg.Pool[Any], host_id: str, now: datetime) -> bool:
    """Whether begin's lane-heads subquery ran for ``host_id`` (EXPLAIN ANALYZE, rolled back)."""
    async with pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            rows = await conn.fetch(f"EXPLAIN (ANALYZE, COSTS OFF) {BEGIN}", host_id, now)
        finally:
            await transaction.rollback()
    plan = "\n".join(r[0] for r in rows)
    heads = [
        line
        for line in plan.splitlines()
        if re.search(r"\bon submissions\b|submissions_lane", line)
    ]
    assert heads, plan  # the heads subquery is in the plan...
    return not all("never executed" in line for line in heads)  # ...and ran, or not


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
    assert len(small) <= 3, small  # begin: one upsert; finish: lock, set
    # Only the host row is locked and written; the outbox deadlines it reads beside it are
    # index minimums (the same statements above, however large the ledger).
    assert all("threadwarden.hosts" in s for s in small), "only the host row is touched"
    begin, *finish = small
    touched = [s for s in finish if re.search(r"\b(submissions|threads|records)\b", s)]
    assert touched == [], "a caught-up finish must not scan the ledger or read history"
    # Begin carries the lane heads for a host with new work; for a caught-up host that part of
    # the statement never runs.
    assert await _heads_executed(scene.pool, ids, at(3_000)) is False
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
    assert alarm_of(host) == MIN_DELAY  # begin pre-arms now + minDelay
    assert await scene.select(begun, 0) is None
    report = await scene.finish(begun, 0, progressed=False, jitter=0.5)
    assert (report.outcome, report.processed, report.alarm_at) == ("actionable", 1, None)

    again = await scene.begin(1_000)  # only one actionable pass
    assert again.caught_up
    cleared = await scene.m.finish_caught_up(scene.host_id, again.epoch, at(1_000))
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
        b = bound(stalls)
        bounds.append(b)
        host = await scene.host()
        delay = rel(host["retry"]["not_before"]) - now
        assert math.ceil(b / 2) <= delay <= b
        assert delay == {0.0: math.ceil(b / 2), 0.5: math.ceil(3 * b / 4), 0.99999: b}[jitter]
        assert host["retry"] == {
            "generation": begun.generation,
            "not_before": to_ms(at(now + delay)),
            "native_only": True,
            "stalls": min(30, stalls + 1),
        }
        assert alarm_of(host) == now + delay == rel(report.alarm_at)
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
    assert alarm_of(host) == now + math.ceil(bound(3) / 2)  # 400 ms, not 50 as after a reset
    await scene.check()


# --- scenarios 13-15: the retry window ------------------------------------------------------


async def test_scenario_13_alarm_inside_an_open_retry_window_is_caught_up(scene: Scene) -> None:
    """Begin reports CaughtUp inside the window and the caught-up finish sets the alarm to
    max(now + minDelay, notBefore). That the workflow then runs auxiliary work only is shown
    end to end in tests/workflows/test_pass_paths.py."""
    await scene.admit()
    await scene.stall([0.0, 0.0, 0.0, 0.99999])  # last window: 800 ms
    before = await scene.host()
    not_before = rel(before["retry"]["not_before"])

    # Early alarms: far from notBefore it wins; within minDelay of it the floor wins.
    for early in (not_before - 500, not_before - 20):
        armed = alarm_of(await scene.host())
        assert armed is not None
        begun = await scene.begin(early)
        assert (begun.caught_up, begun.stalls) == (True, 4)
        # begin's pre-arm is an ensure-by: it keeps an earlier alarm
        assert alarm_of(await scene.host()) == min(armed, early + MIN_DELAY)
        report = await scene.m.finish_caught_up(scene.host_id, begun.epoch, at(early))

        assert report.outcome == "caught-up"
        assert rel(report.alarm_at) == max(early + MIN_DELAY, not_before)
        host = await scene.host()
        assert alarm_of(host) == max(early + MIN_DELAY, not_before)
        assert host["retry"] == before["retry"]
        assert (host["dirty"], host["processed"]) == (before["dirty"], before["processed"])
        await scene.check()

    assert not (await scene.begin(not_before)).caught_up  # the window closes at notBefore


async def test_scenario_14_mutation_in_the_window_obsoletes_the_retry(scene: Scene) -> None:
    await scene.admit()
    await scene.stall([0.0] * 5)
    window = await scene.host()
    assert window["retry"]["stalls"] == 5
    not_before = rel(window["retry"]["not_before"])  # an 800 ms window

    # The mutation races an early, caught-up pass, which must not park the new generation
    # behind the obsolete window. The brief's caught-up finish would set now + wakeScanInterval;
    # ours never postpones a racing commit: its alarm is now + minDelay (docs/protocol.md,
    # "Decisions where the sources were ambiguous").
    early = not_before - 600
    begun = await scene.begin(early)
    assert begun.caught_up
    await scene.admit(during="pass")
    raced = await scene.m.finish_caught_up(
        scene.host_id, begun.epoch, at(early), generation=begun.generation
    )
    assert rel(raced.alarm_at) == early + MIN_DELAY
    assert (await scene.host())["dirty"] == begun.generation + 1
    await scene.check()

    # The mutation's wake starts the next pass at once, still inside the old window.
    inside = early + MIN_DELAY
    begun, _ = await scene.native_pass(inside, settle=False, jitter=0.0)
    assert inside < not_before
    assert (begun.caught_up, begun.stalls, begun.generation) == (False, 0, window["dirty"] + 1)
    host = await scene.host()
    assert (host["retry"]["generation"], host["retry"]["stalls"]) == (begun.generation, 1)
    assert alarm_of(host) == inside + math.ceil(bound(0) / 2)
    await scene.check()

    # A mutation between passes, inside the fresh window, obsoletes it just the same.
    await scene.admit(during="window")
    again = await scene.begin(inside + 10)
    assert rel(host["retry"]["not_before"]) > inside + 10
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
    assert alarm_of(host) == rel(settled.alarm_at) == now + BASE
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
    assert alarm_of(host) == rel(report.alarm_at) == now + BASE
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
        b = bound(failures)
        not_before = rel(host["retry"]["not_before"])
        assert not_before == now + math.ceil(b / 2 + b / 2 * jitter) > previous
        assert (host["retry"]["native_only"], host["retry"]["stalls"]) == (True, failures + 1)
        assert alarm_of(host) == rel(report.alarm_at) == not_before  # no aux deadline, no race
        assert (host["last_outcome"], host["last_error"]) == ("failed", "native step failed")
        await scene.check()
        previous = now = not_before

    # At the cap, a second failure in the same window (the next pass's) with jitter 0 after
    # 0.99 (4975 ms, then 2500 ms) must not pull notBefore earlier.
    seen: list[tuple[int, int | None, int]] = []
    for jitter in (0.99, 0.0):
        begun = await scene.begin(now)
        assert begun.stalls == len(seen) + 8
        await scene.fail(begun, now, jitter=jitter)
        host = await scene.host()
        seen.append((rel(host["retry"]["not_before"]), alarm_of(host), host["retry"]["stalls"]))
    assert seen == [(now + 4_975, now + 4_975, 9), (now + 4_975, now + 4_975, 10)]


async def test_scenario_17_auxiliary_failure_records_native_only_false(scene: Scene) -> None:
    await scene.admit()
    await scene.stall([0.99999] * 4)
    window = await scene.host()
    not_before = rel(window["retry"]["not_before"])  # stalls 4: a 1600 ms window

    # Aux work fails on an early, caught-up alarm: the window only grows, never shrinks.
    early = not_before - 1_500
    begun = await scene.begin(early)
    assert begun.caught_up
    await scene.fail(begun, early, jitter=0.0, native=False)  # e.g. the host drain failed
    host = await scene.host()
    assert host["retry"] == {
        "generation": begun.generation,
        "not_before": to_ms(at(max(not_before, early + math.ceil(bound(4) / 2)))),
        "native_only": False,
        "stalls": 5,
        "epoch": begun.epoch,
    }
    assert alarm_of(host) == rel(host["retry"]["not_before"]) >= not_before
    await scene.check()

    # The final transaction fails after the native work: nativeOnly is false again.
    now = rel(host["retry"]["not_before"])
    begun = await scene.begin(now)
    assert (begun.caught_up, begun.stalls) == (False, 5)
    assert await scene.select(begun, now) == scene.host_id
    await scene.fail(begun, now, jitter=0.0, native=False)  # the final transaction failed
    host = await scene.host()
    assert (host["retry"]["native_only"], host["retry"]["stalls"]) == (False, 6)
    assert alarm_of(host) == rel(host["retry"]["not_before"]) == now + math.ceil(bound(5) / 2)
    assert host["processed"] == window["processed"]
    await scene.check()


async def test_scenario_18_failure_after_dirty_moved_rearms_at_the_floor(scene: Scene) -> None:
    await scene.admit()
    now = 0
    for _ in range(3):  # earlier failures: without a racing mutation the alarm would be later
        begun = await scene.begin(now)
        now = rel((await scene.fail(begun, now, jitter=0.5)).alarm_at)

    begun = await scene.begin(now)
    assert (begun.caught_up, begun.stalls) == (False, 3)
    await scene.admit(racing=True)
    report = await scene.fail(begun, now, jitter=0.99)

    host = await scene.host()
    assert host["dirty"] == begun.generation + 1
    assert (host["retry"]["generation"], host["retry"]["stalls"]) == (begun.generation, 4)
    assert alarm_of(host) == rel(report.alarm_at) == now + MIN_DELAY  # not notBefore
    assert rel(host["retry"]["not_before"]) > now + MIN_DELAY
    await scene.check()

    next_pass = await scene.begin(now + MIN_DELAY)  # the retry is obsolete
    assert (next_pass.caught_up, next_pass.stalls) == (False, 0)
    assert next_pass.generation == begun.generation + 1
