"""Pass and attempt fencing on real Postgres, plus begin, finish and lane selection (§3.5)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import asyncpg
import pytest

from tests.helpers.ledger import BINDINGS, Ledger, now
from tests.helpers.statements import counted_pool
from threadwarden.errors import StaleAttempt, StalePass
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.ledger.models import from_ms, retry_to_json, to_ms
from threadwarden.protocol.decisions import Retry

# --- pass fencing ---------------------------------------------------------------------------

StaleStep = Callable[[Maintenance, str, int], Awaitable[object]]
STALE_STEPS: dict[str, StaleStep] = {
    "finish": lambda m, host, epoch: m.finish(
        host, epoch, generation=2, stalls=0, progressed=True, now=now(), jitter=0.0
    ),
    "select_lane": lambda m, host, epoch: m.select_lane(host, epoch, now()),
    "recover": lambda m, host, epoch: m.recover(host, epoch),
    "finish_caught_up": lambda m, host, epoch: m.finish_caught_up(host, epoch, now()),
    "rearm_failure": lambda m, host, epoch: m.rearm_failure(
        host, epoch, generation=2, native_only=True, now=now(), jitter=0.5, error="boom"
    ),
}


@pytest.mark.parametrize("step", STALE_STEPS)
async def test_stale_pass_step_raises_and_writes_nothing(
    step: str, ledger: Ledger, claim: Claim, ids: str
) -> None:
    await ledger.lapse(claim.submission_id)  # recover would have work to do
    replaced = claim.pass_epoch
    await ledger.begin(ids)
    before = await ledger.snapshot(ids)

    with pytest.raises(StalePass, match=f"pass epoch {replaced} is stale"):
        await STALE_STEPS[step](ledger.maintenance, ids, replaced)

    assert await ledger.snapshot(ids) == before


async def test_attempt_writes_under_a_replaced_pass_raise_stale_pass(
    ledger: Ledger, claim: Claim, ids: str
) -> None:
    await ledger.begin(ids)
    before = await ledger.snapshot(ids)

    with pytest.raises(StalePass):
        await ledger.attempts.append(claim, "message", {"text": "late"})
    with pytest.raises(StalePass):
        await ledger.attempts.settle(claim, "completed")

    assert await ledger.records(claim.submission_id) == []
    assert await ledger.snapshot(ids) == before


async def test_attempt_writes_after_a_reclaim_raise_stale_attempt(
    ledger: Ledger, claim: Claim, ids: str
) -> None:
    await ledger.lapse(claim.submission_id)
    new = await ledger.attempts.claim_head(ids, claim.pass_epoch, ids, bindings=BINDINGS)
    assert new is not None and new.submission_id == claim.submission_id
    assert new.epoch == claim.epoch + 1

    with pytest.raises(StaleAttempt):
        await ledger.attempts.append(claim, "message", {"text": "zombie"})
    with pytest.raises(StaleAttempt):
        await ledger.attempts.settle(claim, "completed")
    await ledger.attempts.append(new, "message", {"text": "live"})

    records = await ledger.records(new.submission_id)
    assert [(r["kind"], r["epoch"], r["body"]) for r in records] == [
        ("message", new.epoch, {"text": "live"})
    ]


async def test_append_after_the_producer_epoch_moved_raises_stale_attempt(
    ledger: Ledger, claim: Claim, ids: str
) -> None:
    await ledger.pool.execute(
        "UPDATE threadwarden.threads SET producer_epoch = producer_epoch + 1 WHERE thread_id = $1",
        ids,
    )

    with pytest.raises(StaleAttempt, match=f"attempt epoch {claim.epoch} is stale"):
        await ledger.attempts.append(claim, "message", {"text": "late"})

    assert await ledger.records(claim.submission_id) == []


async def test_settle_records_one_settlement_per_submission(
    ledger: Ledger, claim: Claim, ids: str
) -> None:
    await ledger.attempts.settle(claim, "completed", result={"ok": True})

    with pytest.raises(StaleAttempt):
        await ledger.attempts.settle(claim, "failed", reason="twice")
    with pytest.raises(asyncpg.UniqueViolationError):
        await ledger.pool.execute(
            "INSERT INTO threadwarden.records (thread_id, sequence, record_id, submission_id,"
            " kind, body, epoch) VALUES ($1, 99, $2, $3, 'settlement', '{}', $4)",
            ids,
            f"{ids}:99",
            claim.submission_id,
            claim.epoch,
        )

    settlements = await ledger.settlements(claim.submission_id)
    assert [r["body"]["outcome"] for r in settlements] == ["completed"]
    row = await ledger.row(claim.submission_id)
    assert (row["state"], row["outcome"]) == ("settled", "completed")


# --- begin ----------------------------------------------------------------------------------


async def test_begin_initialises_a_missing_host_for_one_bootstrap_pass(
    ledger: Ledger, ids: str
) -> None:
    at = now()
    begun = await ledger.maintenance.begin(ids, at)

    assert (begun.epoch, begun.generation, begun.caught_up, begun.stalls) == (1, 1, False, 0)
    host = await ledger.host(ids)
    assert (host["dirty"], host["processed"], host["pass_epoch"]) == (1, 0, 1)
    assert host["alarm_at"] == from_ms(to_ms(at) + 50)


async def test_begin_is_caught_up_when_processed_reaches_dirty(ledger: Ledger, ids: str) -> None:
    await ledger.pool.execute(
        "INSERT INTO threadwarden.hosts (host_id, dirty, processed) VALUES ($1, 4, 4)", ids
    )
    begun = await ledger.begin(ids)
    assert begun.caught_up
    assert begun.generation == 4


async def test_begin_is_caught_up_inside_an_open_retry_window(ledger: Ledger, ids: str) -> None:
    at = now()
    retry = Retry(generation=4, not_before=to_ms(at) + 60_000, native_only=True, stalls=3)
    await ledger.pool.execute(
        "INSERT INTO threadwarden.hosts (host_id, dirty, processed, retry) VALUES ($1, 4, 2, $2)",
        ids,
        retry_to_json(retry),
    )
    begun = await ledger.maintenance.begin(ids, at)
    assert begun.caught_up
    assert begun.stalls == 3


async def test_begin_keeps_an_earlier_alarm(ledger: Ledger, ids: str) -> None:
    earlier = now() - timedelta(hours=1)
    await ledger.pool.execute(
        "INSERT INTO threadwarden.hosts (host_id, alarm_at) VALUES ($1, $2)", ids, earlier
    )
    await ledger.begin(ids)
    assert (await ledger.host(ids))["alarm_at"] == earlier


# --- finish ---------------------------------------------------------------------------------


async def test_finish_acknowledges_only_the_generation_observed_at_begin(
    ledger: Ledger, ids: str
) -> None:
    # A stable wait: the racing follower below stays dormant.
    await ledger.suspend(await ledger.admit(ids))
    begun = await ledger.begin(ids)
    armed = (await ledger.host(ids))["alarm_at"]
    await ledger.admissions.admit(thread_id=ids, agent_id="echo", input={"racing": True})

    report = await ledger.finish(ids, begun)

    host = await ledger.host(ids)
    assert host["processed"] == begun.generation == report.processed
    assert host["dirty"] == begun.generation + 1
    assert host["alarm_at"] is not None and host["alarm_at"] <= armed
    assert host["retry"] is None
    assert host["nonterminal"] == 2


async def test_finish_acknowledges_and_clears_when_nothing_raced(ledger: Ledger, ids: str) -> None:
    await ledger.suspend(await ledger.admit(ids))
    begun = await ledger.begin(ids)

    await ledger.finish(ids, begun)

    host = await ledger.host(ids)
    assert host["processed"] == host["dirty"] == begun.generation
    assert host["alarm_at"] is None


async def test_finish_with_autonomous_work_keeps_processed_and_an_alarm(
    ledger: Ledger, ids: str
) -> None:
    await ledger.admit(ids)
    begun = await ledger.begin(ids)
    processed = (await ledger.host(ids))["processed"]
    at = now()

    await ledger.finish(ids, begun, at=at)

    host = await ledger.host(ids)
    assert host["processed"] == processed < host["dirty"]
    assert host["alarm_at"] == from_ms(to_ms(at) + 50)  # backoff_delay(0, 0) = ceil(100/2)
    assert host["retry"] == {
        "generation": begun.generation,
        "not_before": to_ms(at) + 50,
        "native_only": True,
        "stalls": 1,
    }
    assert host["nonterminal"] == 1


# --- lane selection -------------------------------------------------------------------------


async def test_select_lane_round_robins_and_persists_the_cursor(ledger: Ledger, ids: str) -> None:
    threads = [f"{ids}-A", f"{ids}-B", f"{ids}-C"]
    for thread in reversed(threads):
        await ledger.admit(ids, thread)
    begun = await ledger.begin(ids)

    served = []
    for _ in range(4):
        picked = (await ledger.maintenance.select_lane(ids, begun.epoch, now())).thread_id
        served.append(picked)
        assert (await ledger.host(ids))["last_served_thread_id"] == picked
    assert served == [*threads, threads[0]]

    again = await ledger.begin(ids)  # a new pass continues from the cursor
    assert (await ledger.maintenance.select_lane(ids, again.epoch, now())).thread_id == threads[1]


async def test_a_claim_left_the_selection_serves_the_lane_in_its_one_statement_fenced(
    database_url: str, ledger: Ledger, ids: str
) -> None:
    first, second = f"{ids}-A", f"{ids}-B"
    for thread in (first, second):
        await ledger.admit(ids, thread)
    begun = await ledger.begin(ids)
    picked = await ledger.maintenance.select_lane(ids, begun.epoch, now(), persist=False)
    assert picked.thread_id == first
    assert (await ledger.host(ids))["last_served_thread_id"] is None  # nothing persisted
    wait = timedelta(seconds=60)

    async with counted_pool(database_url) as counted:
        claims = Attempts(counted.pool, lease_ms=30_000)
        await counted.taken()
        before = now()
        serve_ms = int(wait / timedelta(milliseconds=1))
        claim = await claims.claim_head(
            ids, begun.epoch, first, bindings=BINDINGS, serve_ms=serve_ms
        )
        statements = await counted.taken()
        assert claim is not None and len(statements) == 1, statements
        host = await ledger.host(ids)
        assert host["last_served_thread_id"] == first
        assert host["alarm_at"] >= before + wait - timedelta(seconds=1)  # kept ahead

        await ledger.begin(ids)  # a newer pass: the stale one's claim serves nothing
        with pytest.raises(StalePass):
            await claims.claim_head(ids, begun.epoch, second, bindings=BINDINGS, serve_ms=1)
    assert (await ledger.host(ids))["last_served_thread_id"] == first


async def test_select_lane_never_picks_a_suspended_head(ledger: Ledger, ids: str) -> None:
    waiting = await ledger.admit(ids, f"{ids}-A")
    await ledger.admit(ids, f"{ids}-A")
    await ledger.admit(ids, f"{ids}-B")
    await ledger.suspend(waiting)
    begun = await ledger.begin(ids)

    picks = [
        (await ledger.maintenance.select_lane(ids, begun.epoch, now())).thread_id for _ in range(3)
    ]

    assert picks == [f"{ids}-B"] * 3
