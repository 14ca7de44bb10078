"""Brief §5 scenarios 22, 24-26 and 28 on real Postgres: round-robin lanes and binding retries.

Each test drives whole passes through the ledger steps (begin, recover, select, claim, binding
bookkeeping, finish) the way the host workflow orders them, with an injected clock (explicit
``now`` from a fixed instant) and explicit jitter. Heads whose agent id is not in ``BINDINGS``
fail closed with `BindingUnavailable`. Admission stamps its own alarm with the database clock,
so alarm assertions compare only alarms written by pass steps.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from tests.helpers.ledger import Ledger, publish
from tests.helpers.scene import T0, alarm_of, assert_leftovers_armed, at, rel
from threadwarden.errors import BindingUnavailable
from threadwarden.ledger.gate import mark_dirty
from threadwarden.ledger.maintenance import BeginResult
from threadwarden.ledger.models import to_ms
from threadwarden.ledger.pool import create_pool
from threadwarden.protocol.decisions import BindingRetry
from threadwarden.protocol.passes import PassReport as Report
from threadwarden.protocol.passes import Selection

BINDINGS = {"echo": "digest-1"}
UNBOUND = "ghost"  # no binding registered on this worker
BASE, MIN_DELAY = 100, 50


async def _assert_invariants(ledger: Ledger, host_id: str) -> None:
    """Brief §5 preamble: one settlement per settled row, FIFO, fenced epochs, armed leftovers."""
    host, pool = await ledger.host(host_id), ledger.pool
    subs = await pool.fetch(
        "SELECT s.submission_id, s.thread_id, s.sequence, s.state FROM threadwarden.submissions s"
        " JOIN threadwarden.threads t USING (thread_id) WHERE t.host_id = $1"
        " ORDER BY s.thread_id, s.sequence",
        host_id,
    )
    records = await pool.fetch(
        "SELECT r.thread_id, r.record_id, r.submission_id, r.kind, r.epoch, t.producer_epoch"
        "  FROM threadwarden.records r JOIN threadwarden.threads t USING (thread_id)"
        " WHERE t.host_id = $1 ORDER BY r.thread_id, r.sequence",
        host_id,
    )
    settlements = Counter(r["submission_id"] for r in records if r["kind"] == "settlement")
    for s in subs:
        expected = 1 if s["state"] == "settled" else 0
        assert settlements[s["submission_id"]] == expected, dict(s)
    assert len({r["record_id"] for r in records}) == len(records)
    sequence = {s["submission_id"]: s["sequence"] for s in subs}
    last_seq: dict[str, int] = {}
    last_epoch: dict[str, int] = {}
    for r in records:
        thread = r["thread_id"]
        assert r["epoch"] <= r["producer_epoch"]
        assert r["epoch"] >= last_epoch.get(thread, 0), "a record under an older epoch"
        last_epoch[thread] = r["epoch"]
        if r["kind"] == "settlement":
            assert sequence[r["submission_id"]] > last_seq.get(thread, 0), "settled out of order"
            last_seq[thread] = sequence[r["submission_id"]]
    assert_leftovers_armed(dict(host), subs)


@dataclass
class PassRun:
    """What one simulated pass did."""

    begun: BeginResult
    selection: Selection | None = None
    settled: str | None = None
    binding_failure: BindingUnavailable | None = None
    binding: tuple[BindingRetry | None, bool] | None = None
    report: Report | None = None


async def _pass(ledger: Ledger, host_id: str, now: datetime, *, jitter: float = 0.0) -> PassRun:
    """One pass as the host workflow orders it; a claimed head settles ``completed``."""
    maintenance, attempts = ledger.maintenance, ledger.attempts
    begun = await maintenance.begin(host_id, now)
    run = PassRun(begun)
    if begun.caught_up:
        run.report = await maintenance.finish_caught_up(host_id, begun.epoch, now)
        return run
    repaired = (await maintenance.recover(host_id, begun.epoch)).repaired
    run.selection = selected = await maintenance.select_lane(host_id, begun.epoch, now)
    if selected.thread_id is not None:
        try:
            claim = await attempts.claim_head(
                host_id,
                begun.epoch,
                selected.thread_id,
                bindings=BINDINGS,
                submission_id=selected.submission_id,
            )
        except BindingUnavailable as error:
            claim, run.binding_failure = None, error
        if claim is not None:
            await attempts.settle(claim, "completed", result={"by": "pass"})
            run.settled = claim.submission_id
        if run.binding_failure is not None or selected.binding_retry_pending:
            submission_id = (
                run.binding_failure.submission_id if run.binding_failure else None
            ) or selected.submission_id
            assert submission_id is not None
            run.binding = await maintenance.record_binding_result(
                host_id,
                begun.epoch,
                thread_id=selected.thread_id,
                submission_id=submission_id,
                failed=run.binding_failure is not None,
                now=now,
            )
    await publish(ledger.pool, host_id)  # the finish activity drains first
    run.report = await maintenance.finish(
        host_id,
        begun.epoch,
        generation=begun.generation,
        stalls=begun.stalls,
        progressed=run.settled is not None or repaired > 0,
        now=now,
        jitter=jitter,
        selected=selected.submission_id,
        other_lanes_at=selected.other_lanes_at,
    )
    return run


def _next(run: PassRun) -> int:
    """When the pass's alarm fires, on the injected clock."""
    assert run.report is not None and run.report.alarm_at is not None
    return rel(run.report.alarm_at)


# --- scenario 22 ----------------------------------------------------------------------------


async def test_scenario_22_round_robin_serves_a_b_c_a_and_survives_eviction(
    database_url: str, ledger: Ledger, ids: str
) -> None:
    a, waiting, b, c = (f"{ids}-A", f"{ids}-AB", f"{ids}-B", f"{ids}-C")
    for thread in (c, b, a, c, b, a):  # admission order must not matter
        await ledger.admit(ids, thread)
    suspended = await ledger.admit(ids, waiting)
    await ledger.admissions.admit(
        thread_id=waiting, agent_id="echo", input={"dormant": True}, host_id=ids
    )
    await ledger.suspend(suspended)

    now, served = 0, []
    for _ in range(4):
        run = await _pass(ledger, ids, at(now))
        assert run.selection is not None and run.settled is not None
        served.append(run.selection.thread_id)
        assert (await ledger.host(ids))["last_served_thread_id"] == run.selection.thread_id
        assert _next(run) == now + BASE  # progress with work left: the base delay
        await _assert_invariants(ledger, ids)
        now = _next(run)
    assert served == [a, b, c, a]

    evicted = await create_pool(database_url, max_size=2)  # a new incarnation: no memory kept
    try:
        fresh = Ledger.defaults(evicted)
        fifth = await _pass(fresh, ids, at(now))
        assert fifth.selection is not None and fifth.settled is not None
        sixth = await _pass(fresh, ids, at(_next(fifth)))
        assert sixth.selection is not None and sixth.settled is not None
        served += [fifth.selection.thread_id, sixth.selection.thread_id]
    finally:
        await evicted.close()

    assert served == [a, b, c, a, b, c]
    assert waiting not in served
    host = await ledger.host(ids)
    assert (await ledger.row(suspended))["state"] == "suspended"
    # Only the stable wait and its dormant follower remain: acknowledged, alarm cleared.
    assert host["processed"] == host["dirty"]
    assert host["alarm_at"] is None
    assert host["nonterminal"] == 2
    await _assert_invariants(ledger, ids)


# --- scenarios 24-26: binding retries -------------------------------------------------------


async def _heads(pool: asyncpg.Pool[Any], thread_id: str) -> list[str]:
    rows = await pool.fetch(
        "SELECT submission_id FROM threadwarden.submissions WHERE thread_id = $1"
        " AND state <> 'settled' ORDER BY sequence",
        thread_id,
    )
    return [r["submission_id"] for r in rows]


async def test_scenario_24_binding_unavailable_releases_the_claim_and_keeps_others_servable(
    ledger: Ledger, ids: str
) -> None:
    blocked, other = f"{ids}-A", f"{ids}-B"
    head = await ledger.admissions.admit(thread_id=blocked, agent_id=UNBOUND, input={}, host_id=ids)
    for n in range(2):
        await ledger.admissions.admit(thread_id=other, agent_id="echo", input={"n": n}, host_id=ids)

    first = await _pass(ledger, ids, at(0))

    assert first.selection is not None and first.selection.thread_id == blocked
    assert first.binding_failure is not None
    assert first.binding_failure.submission_id == head.submission_id
    row = await ledger.row(head.submission_id)
    assert (row["state"], row["attempts"], row["epoch"]) == ("ready", 0, 0)
    assert (row["ownership_token"], row["lease_expires_at"]) == (None, None)
    epoch = "SELECT producer_epoch FROM threadwarden.threads WHERE thread_id = $1"
    assert await ledger.pool.fetchval(epoch, blocked) == 0  # the claim was never taken
    assert first.binding is not None
    entry, report = first.binding
    assert report is True  # the first failure is logged at error level
    assert entry == BindingRetry(
        blocked, head.submission_id, 1, to_ms(at(5_000)), to_ms(T0), first.begun.epoch
    )
    host = await ledger.host(ids)
    assert host["binding_retries"] == [
        {
            "thread_id": blocked,
            "submission_id": head.submission_id,
            "attempts": 1,
            "not_before": to_ms(at(5_000)),
            "reported_at": to_ms(T0),
            "epoch": first.begun.epoch,
        }
    ]
    assert first.report is not None and first.report.outcome == "actionable"  # pass succeeds
    # Another thread is eligible now, so the blocked head does not delay the alarm.
    assert _next(first) == MIN_DELAY  # backoff(0, jitter 0)
    await _assert_invariants(ledger, ids)

    served = []
    now = _next(first)
    for _ in range(2):  # the cursor wraps to the blocked thread, which is skipped
        run = await _pass(ledger, ids, at(now))
        assert run.selection is not None and run.settled is not None
        served.append(run.selection.thread_id)
        await _assert_invariants(ledger, ids)
        assert _next(run) == now + BASE  # progress; the served lane was eligible before it
        now = _next(run)
    assert served == [other, other]
    # Only the blocked head remains: the next pass selects nothing and waits for its notBefore.
    last = await _pass(ledger, ids, at(now))
    assert last.selection is not None and last.selection.thread_id is None
    assert last.selection.other_lanes_at == at(5_000)
    assert _next(last) == 5_000
    assert (await ledger.host(ids))["binding_retries"][0]["attempts"] == 1
    assert last.report is not None and last.report.nonterminal == 1
    await _assert_invariants(ledger, ids)


async def test_next_eligible_is_taken_over_the_lanes_eligible_before_the_attempt(
    ledger: Ledger, ids: str
) -> None:
    """Brief §3.5 (e) 8: nextEligible[t] is computed for the eligible set of step 2, before the
    attempt. A lane served and emptied by this pass counts as eligible now, so the alarm is the
    ordinary delay (base, after progress), not a blocked lane's far notBefore."""
    blocked, served = f"{ids}-A", f"{ids}-B"
    await ledger.admissions.admit(thread_id=blocked, agent_id=UNBOUND, input={}, host_id=ids)
    first = await _pass(ledger, ids, at(0))  # A fails closed: +5 s
    assert first.binding is not None and first.binding[0] is not None
    assert first.binding[0].not_before == to_ms(at(5_000))
    assert _next(first) == 5_000  # A was the only eligible lane
    await ledger.admissions.admit(thread_id=served, agent_id="echo", input={}, host_id=ids)

    now = 1_000  # inside A's binding window; B's admission woke the host
    run = await _pass(ledger, ids, at(now), jitter=0.99)

    assert run.selection is not None and run.selection.thread_id == served
    assert run.selection.other_lanes_at == at(5_000)  # A, blocked, eligible before the attempt
    assert run.settled is not None and await _heads(ledger.pool, served) == []  # B emptied
    # eligible = [A, B]; nextEligible = [5000 (A's notBefore), now (B: no entry)]:
    # bindingDelay = 0, delay = max(base (progress), 0). Over the heads left after the attempt
    # ([A] only) it would have been 5000 - now.
    assert run.report is not None and run.report.alarm_at == at(now + BASE)
    host = await ledger.host(ids)
    assert alarm_of(host) == now + BASE and host["retry"] is None
    await _assert_invariants(ledger, ids)

    # The next pass finds only A, blocked: now it waits for A's notBefore exactly.
    now += BASE
    after = await _pass(ledger, ids, at(now), jitter=0.99)
    assert after.selection is not None and after.selection.thread_id is None
    assert after.report is not None and after.report.alarm_at == at(5_000)
    await _assert_invariants(ledger, ids)


async def test_scenario_25_persistent_binding_failure_backs_off_5_10_20_40_60_60(
    ledger: Ledger, ids: str
) -> None:
    head = await ledger.admissions.admit(thread_id=ids, agent_id=UNBOUND, input={})
    now, delays, attempt_counts = 0, [], []
    for n in range(35):
        run = await _pass(ledger, ids, at(now), jitter=0.5)
        assert not run.begun.caught_up
        assert run.selection is not None and run.selection.thread_id == ids
        assert run.selection.binding_retry_pending is (n > 0)
        assert run.binding is not None and run.binding[0] is not None
        entry = run.binding[0]
        assert entry.submission_id == head.submission_id
        delays.append(rel(entry.not_before) - now)
        attempt_counts.append(entry.attempts)
        # The only eligible thread is blocked: the alarm never fires before its notBefore.
        assert _next(run) - now >= rel(entry.not_before) - now
        assert _next(run) == rel(entry.not_before)
        await _assert_invariants(ledger, ids)

        if n == 2:  # a mutation inside the binding window: the pass runs but skips the head
            await ledger.admissions.admit(thread_id=ids, agent_id=UNBOUND, input={"follower": True})
            inside = now + 5_000
            skipped = await _pass(ledger, ids, at(inside), jitter=0.5)
            assert not skipped.begun.caught_up
            assert skipped.selection is not None and skipped.selection.thread_id is None
            assert skipped.binding is None
            assert _next(skipped) == rel(entry.not_before)
            assert (await ledger.host(ids))["binding_retries"][0]["attempts"] == 3
            await _assert_invariants(ledger, ids)
        now = _next(run)

    seconds = [d // 1_000 for d in delays]
    assert seconds[:6] == [5, 10, 20, 40, 60, 60]
    assert set(seconds[4:]) == {60}
    assert attempt_counts == [min(30, n + 1) for n in range(35)]
    row = await ledger.row(head.submission_id)
    assert (row["state"], row["attempts"]) == ("ready", 0)  # never ran, still pending


async def test_scenario_26_binding_failures_report_at_most_once_per_15_minutes(
    ledger: Ledger, ids: str
) -> None:
    await ledger.admissions.admit(thread_id=ids, agent_id=UNBOUND, input={})
    # Passes may run later than their alarm (a slow sweeper), never earlier.
    expected = [
        (0, True, 0),
        (5_000, False, 0),
        (899_999, False, 0),
        (919_999, True, 919_999),  # >= 900,000 ms after the last report: error level again
        (959_999, False, 919_999),
    ]
    for now, report, reported_at in expected:
        run = await _pass(ledger, ids, at(now))
        assert run.binding is not None and run.binding[0] is not None
        assert run.binding[1] is report, f"report flag at {now} ms"
        assert rel(run.binding[0].reported_at) == reported_at
        stored = (await ledger.host(ids))["binding_retries"]
        assert [rel(e["reported_at"]) for e in stored] == [reported_at]
        await _assert_invariants(ledger, ids)

    # The boundary itself: exactly 900,000 ms after the report is reported again.
    edge = f"{ids}-edge"
    await ledger.admissions.admit(thread_id=edge, agent_id=UNBOUND, input={})
    at_start = await _pass(ledger, edge, at(0))
    assert at_start.binding == (
        BindingRetry(
            edge,
            (await _heads(ledger.pool, edge))[0],
            1,
            to_ms(at(5_000)),
            to_ms(T0),
            at_start.begun.epoch,
        ),
        True,
    )
    at_edge = await _pass(ledger, edge, at(900_000))
    assert at_edge.binding is not None and at_edge.binding[1] is True
    assert at_edge.binding[0] is not None and rel(at_edge.binding[0].reported_at) == 900_000


# --- scenario 28 ----------------------------------------------------------------------------


async def _abort(pool: asyncpg.Pool[Any], host_id: str, submission_id: str) -> None:
    """An operator abort of a never-claimed head: its settlement record, then a dirty bump."""
    async with pool.acquire() as conn, conn.transaction():
        # Lock order everywhere: hosts, then threads, then submissions.
        await conn.execute(
            "SELECT 1 FROM threadwarden.hosts WHERE host_id = $1 FOR UPDATE", host_id
        )
        thread = await conn.fetchrow(
            "SELECT t.thread_id, t.next_record, t.producer_epoch FROM threadwarden.threads t"
            " JOIN threadwarden.submissions s USING (thread_id) WHERE s.submission_id = $1"
            " FOR UPDATE OF t",
            submission_id,
        )
        assert thread is not None
        await conn.execute(
            "INSERT INTO threadwarden.records (thread_id, sequence, record_id, submission_id,"
            " kind, body, epoch) VALUES ($1, $2, $3, $4, 'settlement',"
            ' \'{"outcome": "aborted"}\'::jsonb, $5)',
            thread["thread_id"],
            thread["next_record"],
            f"{thread['thread_id']}:{thread['next_record']}",
            submission_id,
            thread["producer_epoch"],
        )
        await conn.execute(
            "UPDATE threadwarden.threads SET next_record = next_record + 1 WHERE thread_id = $1",
            thread["thread_id"],
        )
        await conn.execute(
            "UPDATE threadwarden.submissions SET state = 'settled', outcome = 'aborted',"
            " reason = 'operator abort', settled_at = clock_timestamp()"
            " WHERE submission_id = $1",
            submission_id,
        )
        await mark_dirty(conn, host_id, minimum_alarm_delay_ms=MIN_DELAY)


async def test_scenario_28_stale_binding_retry_is_ignored_and_pruned_after_head_changed(
    ledger: Ledger, ids: str
) -> None:
    old = await ledger.admissions.admit(thread_id=ids, agent_id=UNBOUND, input={})
    new = await ledger.admissions.admit(thread_id=ids, agent_id="echo", input={"n": 1})
    await ledger.admissions.admit(thread_id=ids, agent_id="echo", input={"n": 2})

    first = await _pass(ledger, ids, at(0))
    assert first.binding is not None and first.binding[0] is not None
    assert first.binding[0].submission_id == old.submission_id
    assert _next(first) == 5_000  # the only thread is blocked until the retry is due

    await _abort(ledger.pool, ids, old.submission_id)
    begun = await ledger.maintenance.begin(ids, at(1_000))  # inside the stale entry's window
    assert not begun.caught_up
    selected = await ledger.maintenance.select_lane(ids, begun.epoch, at(1_000))

    assert selected.thread_id == ids  # the stale entry no longer blocks the thread
    assert selected.submission_id == new.submission_id
    assert selected.binding_retry_pending is False
    stored = (await ledger.host(ids))["binding_retries"]
    assert [e["submission_id"] for e in stored] == [old.submission_id]  # select does not prune
    claim = await ledger.attempts.claim_head(ids, begun.epoch, ids, bindings=BINDINGS)
    assert claim is not None and claim.submission_id == new.submission_id
    await ledger.attempts.settle(claim, "completed", result={"ok": True})
    report = await ledger.maintenance.finish(
        ids,
        begun.epoch,
        generation=begun.generation,
        stalls=begun.stalls,
        progressed=True,
        now=at(1_000),
        jitter=0.0,
        selected=selected.submission_id,
        other_lanes_at=selected.other_lanes_at,
    )

    host = await ledger.host(ids)
    assert host["binding_retries"] == []  # pruned at finish
    assert report.alarm_at is not None and rel(report.alarm_at) == 1_000 + BASE  # not 5,000
    assert alarm_of(host) == 1_000 + BASE
    assert host["nonterminal"] == 1
    assert (await ledger.row(old.submission_id))["outcome"] == "aborted"
    await _assert_invariants(ledger, ids)
