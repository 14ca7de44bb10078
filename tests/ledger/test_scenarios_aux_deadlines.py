"""Brief §5 scenarios 13, 16 and 17, their auxiliary-deadline halves, on real Postgres: the
deadline of every kind of auxiliary work (the host plug-in's, a publication retry, a message
delivery, the projection) joins the alarm as the protocol says."""

from __future__ import annotations

import math

import pytest

from tests.helpers.scene import MIN_DELAY, Scene, alarm_of, at, bound, rel
from threadwarden.ledger.records import insert_record

AUX_SOURCES = ("host", "publication", "message", "projection")


async def set_aux_deadline(scene: Scene, source: str, due: int) -> int | None:
    """Make ``source`` the host's one auxiliary deadline, due at ``due``; returns the deadline to
    pass as the host plug-in's (``extra_deadline``), or None when it lives in the ledger."""
    pool, host = scene.pool, scene.host_id
    if source == "host":
        return due
    if source == "projection":
        await pool.execute(
            "UPDATE threadwarden.hosts SET projection_due_at = $2 WHERE host_id = $1", host, at(due)
        )
    elif source == "message":
        await pool.execute(
            "INSERT INTO threadwarden.messages (message_id, source_host_id, source_thread_id,"
            " source_submission_id, destination_thread_id, agent_id, input, not_before)"
            " VALUES ($1, $1, $1, 'sub_x', 'elsewhere', 'echo', '{}', $2)"
            " ON CONFLICT (message_id) DO UPDATE SET not_before = EXCLUDED.not_before",
            host,
            at(due),
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
                at(due),
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
    not_before = rel((await scene.host())["retry"]["not_before"])
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
            at(early),
            extra_deadline=None if extra is None else at(extra),
        )
        assert rel(report.alarm_at) == alarm_of(await scene.host()) == expected
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
    assert rel(host["retry"]["not_before"]) == 1_000 + math.ceil(bound(0) * 0.75)
    assert rel(report.alarm_at) == alarm_of(host) == 1_000 + MIN_DELAY
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
    not_before = rel(host["retry"]["not_before"])
    assert host["retry"]["native_only"] is False and not_before == 1_000 + math.ceil(99.5)
    assert alarm_of(host) == not_before
    extra = await set_aux_deadline(scene, source, not_before + 60)
    begun = await scene.begin(not_before)
    await scene.fail(begun, not_before, jitter=0.99, native=False, aux_deadline=extra)
    host = await scene.host()
    assert rel(host["retry"]["not_before"]) > not_before + 60
    assert alarm_of(host) == not_before + 60
    await scene.check()
