"""Pass and attempt fencing on real Postgres, plus begin, finish and lane selection (§3.5)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from threadwarden.errors import StaleAttempt, StalePass
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.ledger.models import from_ms, retry_to_json, to_ms
from threadwarden.protocol.decisions import Retry

BINDINGS = {"echo": "digest-1"}


def _now() -> datetime:
    return datetime.now(UTC)


async def _host(pool: asyncpg.Pool[Any], host_id: str) -> dict[str, Any]:
    row = await pool.fetchrow("SELECT * FROM threadwarden.hosts WHERE host_id = $1", host_id)
    assert row is not None, f"host {host_id} missing"
    return dict(row)


async def _submissions(pool: asyncpg.Pool[Any], host_id: str) -> list[dict[str, Any]]:
    rows = await pool.fetch(
        "SELECT s.* FROM threadwarden.submissions s JOIN threadwarden.threads t"
        " USING (thread_id) WHERE t.host_id = $1 ORDER BY s.submission_id",
        host_id,
    )
    return [dict(r) for r in rows]


async def _records(pool: asyncpg.Pool[Any], submission_id: str) -> list[dict[str, Any]]:
    rows = await pool.fetch(
        "SELECT * FROM threadwarden.records WHERE submission_id = $1 ORDER BY sequence",
        submission_id,
    )
    return [dict(r) for r in rows]


async def _lapse_lease(pool: asyncpg.Pool[Any], submission_id: str) -> None:
    await pool.execute(
        "UPDATE threadwarden.submissions SET lease_expires_at = clock_timestamp() - interval '1 s'"
        " WHERE submission_id = $1",
        submission_id,
    )


async def _claim(
    maintenance: Maintenance, attempts: Attempts, host_id: str, thread_id: str
) -> Claim:
    begun = await maintenance.begin(host_id, _now())
    claim = await attempts.claim_head(host_id, begun.epoch, thread_id, bindings=BINDINGS)
    assert claim is not None
    return claim


# --- pass fencing ---------------------------------------------------------------------------

StaleStep = Callable[[Maintenance, str, int], Awaitable[object]]
STALE_STEPS: dict[str, StaleStep] = {
    "finish": lambda m, host, epoch: m.finish(
        host, epoch, generation=2, stalls=0, progressed=True, now=_now(), jitter=0.0
    ),
    "select_lane": lambda m, host, epoch: m.select_lane(host, epoch, _now()),
    "recover": lambda m, host, epoch: m.recover(host, epoch),
    "finish_caught_up": lambda m, host, epoch: m.finish_caught_up(host, epoch, _now()),
    "rearm_failure": lambda m, host, epoch: m.rearm_failure(
        host, epoch, generation=2, native_only=True, now=_now(), jitter=0.5, error="boom"
    ),
}


@pytest.mark.parametrize("step", STALE_STEPS)
async def test_stale_pass_step_raises_and_writes_nothing(
    step: str,
    maintenance: Maintenance,
    attempts: Attempts,
    admissions: Admissions,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    claim = await _claim(maintenance, attempts, ids, ids)
    await _lapse_lease(pool, claim.submission_id)  # recover would have work to do
    replaced = claim.pass_epoch
    await maintenance.begin(ids, _now())
    host_before, rows_before = await _host(pool, ids), await _submissions(pool, ids)

    with pytest.raises(StalePass, match=f"pass epoch {replaced} is stale"):
        await STALE_STEPS[step](maintenance, ids, replaced)

    assert await _host(pool, ids) == host_before
    assert await _submissions(pool, ids) == rows_before


async def test_attempt_writes_under_a_replaced_pass_raise_stale_pass(
    maintenance: Maintenance,
    attempts: Attempts,
    admissions: Admissions,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    claim = await _claim(maintenance, attempts, ids, ids)
    await maintenance.begin(ids, _now())
    rows_before = await _submissions(pool, ids)

    with pytest.raises(StalePass):
        await attempts.append(claim, "message", {"text": "late"})
    with pytest.raises(StalePass):
        await attempts.settle(claim, "completed")

    assert await _records(pool, claim.submission_id) == []
    assert await _submissions(pool, ids) == rows_before


async def test_attempt_writes_after_a_reclaim_raise_stale_attempt(
    maintenance: Maintenance,
    attempts: Attempts,
    admissions: Admissions,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    old = await _claim(maintenance, attempts, ids, ids)
    await _lapse_lease(pool, old.submission_id)
    new = await attempts.claim_head(ids, old.pass_epoch, ids, bindings=BINDINGS)
    assert new is not None and new.submission_id == old.submission_id
    assert new.epoch == old.epoch + 1

    with pytest.raises(StaleAttempt):
        await attempts.append(old, "message", {"text": "zombie"})
    with pytest.raises(StaleAttempt):
        await attempts.settle(old, "completed")
    await attempts.append(new, "message", {"text": "live"})

    records = await _records(pool, new.submission_id)
    assert [(r["kind"], r["epoch"], r["body"]) for r in records] == [
        ("message", new.epoch, {"text": "live"})
    ]


async def test_append_after_the_producer_epoch_moved_raises_stale_attempt(
    maintenance: Maintenance,
    attempts: Attempts,
    admissions: Admissions,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    claim = await _claim(maintenance, attempts, ids, ids)
    await pool.execute(
        "UPDATE threadwarden.threads SET producer_epoch = producer_epoch + 1 WHERE thread_id = $1",
        ids,
    )

    with pytest.raises(StaleAttempt, match=f"attempt epoch {claim.epoch} is stale"):
        await attempts.append(claim, "message", {"text": "late"})

    assert await _records(pool, claim.submission_id) == []


async def test_settle_records_one_settlement_per_submission(
    maintenance: Maintenance,
    attempts: Attempts,
    admissions: Admissions,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    claim = await _claim(maintenance, attempts, ids, ids)
    await attempts.settle(claim, "completed", result={"ok": True})

    with pytest.raises(StaleAttempt):
        await attempts.settle(claim, "failed", reason="twice")
    with pytest.raises(asyncpg.UniqueViolationError):
        await pool.execute(
            "INSERT INTO threadwarden.records (thread_id, sequence, record_id, submission_id,"
            " kind, body, epoch) VALUES ($1, 99, $2, $3, 'settlement', '{}', $4)",
            ids,
            f"{ids}:99",
            claim.submission_id,
            claim.epoch,
        )

    records = await _records(pool, claim.submission_id)
    settlements = [r for r in records if r["kind"] == "settlement"]
    assert [r["body"]["outcome"] for r in settlements] == ["completed"]
    row = (await _submissions(pool, ids))[0]
    assert (row["state"], row["outcome"]) == ("settled", "completed")


# --- begin ----------------------------------------------------------------------------------


async def test_begin_initialises_a_missing_host_for_one_bootstrap_pass(
    maintenance: Maintenance, pool: asyncpg.Pool[Any], ids: str
) -> None:
    now = _now()
    begun = await maintenance.begin(ids, now)

    assert (begun.epoch, begun.generation, begun.caught_up, begun.stalls) == (1, 1, False, 0)
    host = await _host(pool, ids)
    assert (host["dirty"], host["processed"], host["pass_epoch"]) == (1, 0, 1)
    assert host["alarm_at"] == from_ms(to_ms(now) + 50)


async def test_begin_is_caught_up_when_processed_reaches_dirty(
    maintenance: Maintenance, pool: asyncpg.Pool[Any], ids: str
) -> None:
    await pool.execute(
        "INSERT INTO threadwarden.hosts (host_id, dirty, processed) VALUES ($1, 4, 4)", ids
    )
    begun = await maintenance.begin(ids, _now())
    assert begun.caught_up
    assert begun.generation == 4


async def test_begin_is_caught_up_inside_an_open_retry_window(
    maintenance: Maintenance, pool: asyncpg.Pool[Any], ids: str
) -> None:
    now = _now()
    retry = Retry(generation=4, not_before=to_ms(now) + 60_000, native_only=True, stalls=3)
    await pool.execute(
        "INSERT INTO threadwarden.hosts (host_id, dirty, processed, retry) VALUES ($1, 4, 2, $2)",
        ids,
        retry_to_json(retry),
    )
    begun = await maintenance.begin(ids, now)
    assert begun.caught_up
    assert begun.stalls == 3


async def test_begin_keeps_an_earlier_alarm(
    maintenance: Maintenance, pool: asyncpg.Pool[Any], ids: str
) -> None:
    earlier = _now() - timedelta(hours=1)
    await pool.execute(
        "INSERT INTO threadwarden.hosts (host_id, alarm_at) VALUES ($1, $2)", ids, earlier
    )
    await maintenance.begin(ids, _now())
    assert (await _host(pool, ids))["alarm_at"] == earlier


# --- finish ---------------------------------------------------------------------------------


async def test_finish_acknowledges_only_the_generation_observed_at_begin(
    maintenance: Maintenance, admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    head = await admissions.admit(thread_id=ids, agent_id="echo", input={})
    await pool.execute(  # a stable wait: the racing follower below stays dormant
        "UPDATE threadwarden.submissions SET state = 'suspended' WHERE submission_id = $1",
        head.submission_id,
    )
    begun = await maintenance.begin(ids, _now())
    armed = (await _host(pool, ids))["alarm_at"]
    await admissions.admit(thread_id=ids, agent_id="echo", input={"racing": True})

    report = await maintenance.finish(
        ids,
        begun.epoch,
        generation=begun.generation,
        stalls=begun.stalls,
        progressed=False,
        now=_now(),
        jitter=0.0,
    )

    host = await _host(pool, ids)
    assert host["processed"] == begun.generation == report.processed
    assert host["dirty"] == begun.generation + 1
    assert host["alarm_at"] is not None and host["alarm_at"] <= armed
    assert host["retry"] is None
    assert host["nonterminal"] == 2


async def test_finish_acknowledges_and_clears_when_nothing_raced(
    maintenance: Maintenance, admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    head = await admissions.admit(thread_id=ids, agent_id="echo", input={})
    await pool.execute(
        "UPDATE threadwarden.submissions SET state = 'suspended' WHERE submission_id = $1",
        head.submission_id,
    )
    begun = await maintenance.begin(ids, _now())

    await maintenance.finish(
        ids,
        begun.epoch,
        generation=begun.generation,
        stalls=0,
        progressed=False,
        now=_now(),
        jitter=0.0,
    )

    host = await _host(pool, ids)
    assert host["processed"] == host["dirty"] == begun.generation
    assert host["alarm_at"] is None


async def test_finish_with_autonomous_work_keeps_processed_and_an_alarm(
    maintenance: Maintenance, admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    begun = await maintenance.begin(ids, _now())
    processed = (await _host(pool, ids))["processed"]
    now = _now()

    await maintenance.finish(
        ids,
        begun.epoch,
        generation=begun.generation,
        stalls=0,
        progressed=False,
        now=now,
        jitter=0.0,
    )

    host = await _host(pool, ids)
    assert host["processed"] == processed < host["dirty"]
    assert host["alarm_at"] == from_ms(to_ms(now) + 50)  # backoff_delay(0, 0) = ceil(100/2)
    assert host["retry"] == {
        "generation": begun.generation,
        "not_before": to_ms(now) + 50,
        "native_only": True,
        "stalls": 1,
    }
    assert host["nonterminal"] == 1


# --- lane selection -------------------------------------------------------------------------


async def test_select_lane_round_robins_and_persists_the_cursor(
    maintenance: Maintenance, admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    threads = [f"{ids}-A", f"{ids}-B", f"{ids}-C"]
    for thread in reversed(threads):
        await admissions.admit(thread_id=thread, agent_id="echo", input={}, host_id=ids)
    begun = await maintenance.begin(ids, _now())

    served = []
    for _ in range(4):
        picked = (await maintenance.select_lane(ids, begun.epoch, _now())).thread_id
        served.append(picked)
        assert (await _host(pool, ids))["last_served_thread_id"] == picked
    assert served == [*threads, threads[0]]

    again = await maintenance.begin(ids, _now())  # a new pass continues from the cursor
    assert (await maintenance.select_lane(ids, again.epoch, _now())).thread_id == threads[1]


async def test_select_lane_never_picks_a_suspended_head(
    maintenance: Maintenance, admissions: Admissions, pool: asyncpg.Pool[Any], ids: str
) -> None:
    waiting = await admissions.admit(thread_id=f"{ids}-A", agent_id="echo", input={}, host_id=ids)
    await admissions.admit(thread_id=f"{ids}-A", agent_id="echo", input={}, host_id=ids)
    await admissions.admit(thread_id=f"{ids}-B", agent_id="echo", input={}, host_id=ids)
    await pool.execute(
        "UPDATE threadwarden.submissions SET state = 'suspended' WHERE submission_id = $1",
        waiting.submission_id,
    )
    begun = await maintenance.begin(ids, _now())

    picks = [(await maintenance.select_lane(ids, begun.epoch, _now())).thread_id for _ in range(3)]

    assert picks == [f"{ids}-B"] * 3
