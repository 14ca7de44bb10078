"""Failpoints: silent unless armed; raise or pause exactly where armed."""

import asyncio

import pytest

from threadwarden.errors import InvalidInput
from threadwarden.failpoints import LOCATIONS, FailpointError, Failpoints


def test_failpoints_cover_every_location_of_the_spec() -> None:
    phases = ("dirty", "mutation", "ensure", "begin", "select", "binding-retry", "retry", "finish")
    for phase in phases:
        assert {f"maintenance:{phase}:before", f"maintenance:{phase}:after"} <= LOCATIONS
    assert {"maintenance:mutation:armed", "maintenance:mutation:finished"} <= LOCATIONS
    assert {"claim", "settle"} <= LOCATIONS


async def test_failpoints_unarmed_hit_does_nothing() -> None:
    failpoints = Failpoints()
    for location in LOCATIONS:
        await failpoints.hit(location)
    assert failpoints.hits == {}


async def test_failpoints_armed_location_raises_only_there_and_only_as_often_as_asked() -> None:
    failpoints = Failpoints()
    failpoints.arm("claim", times=2)
    await failpoints.hit("settle")
    for _ in range(2):
        with pytest.raises(FailpointError, match="claim"):
            await failpoints.hit("claim")
    await failpoints.hit("claim")  # spent
    assert failpoints.hits == {"claim": 2}


async def test_failpoints_raise_the_error_given() -> None:
    failpoints = Failpoints()
    failpoints.arm("maintenance:begin:before", raise_error=ConnectionResetError("boom"))
    with pytest.raises(ConnectionResetError, match="boom"):
        await failpoints.hit("maintenance:begin:before")


async def test_failpoints_pause_until_released() -> None:
    failpoints = Failpoints()
    failpoints.arm("maintenance:finish:before", pause=True)
    paused = asyncio.create_task(failpoints.hit("maintenance:finish:before"))
    await failpoints.reached("maintenance:finish:before")
    assert not paused.done()
    failpoints.release("maintenance:finish:before")
    await asyncio.wait_for(paused, 5)
    await failpoints.hit("maintenance:finish:before")  # released means disarmed


def test_failpoints_refuse_unknown_locations() -> None:
    with pytest.raises(InvalidInput, match="location"):
        Failpoints().arm("maintenance:finsh:before")


async def test_failpoints_a_one_shot_pause_can_still_be_released() -> None:
    failpoints = Failpoints()
    failpoints.arm("claim", pause=True, times=1)
    paused = asyncio.create_task(failpoints.hit("claim"))
    await failpoints.reached("claim")
    failpoints.release("claim")
    await asyncio.wait_for(paused, 5)


async def test_failpoints_from_a_spec_fire_with_their_probability_reproducibly() -> None:
    async def fired(spec: str) -> list[bool]:
        failpoints = Failpoints.from_spec(spec)
        results = []
        for _ in range(200):
            try:
                await failpoints.hit("attempt:append")
            except FailpointError:
                results.append(True)
            else:
                results.append(False)
            await failpoints.hit("claim")  # not armed: never fires
        return results

    first = await fired("attempt:append=0.25:seed=11")
    assert 20 < sum(first) < 80  # about a quarter of 200 hits
    assert first == await fired("attempt:append=0.25:seed=11")  # the seed reproduces it
    assert sum(await fired("attempt:append=1")) == 200


@pytest.mark.parametrize(
    "spec", ["attempt:append", "attempt:append=0", "attempt:append=2", "nowhere=0.5", "a=1:seed=x"]
)
def test_failpoints_refuse_a_malformed_spec_naming_the_setting(spec: str) -> None:
    with pytest.raises(InvalidInput, match="^failpoints: expected"):
        Failpoints.from_spec(spec)


async def test_a_stalled_pause_outlives_its_tasks_cancellation_and_goes_on_once_released() -> None:
    """A zombie: cancelled while paused, it has not heard of it, and runs on when released
    (a plain pause ends with the cancellation)."""
    for stalled, outcome in ((True, "went on"), (False, "cancelled")):
        failpoints = Failpoints()
        failpoints.arm("maintenance:finish:before", pause=True, stalled=stalled)

        async def finish(failpoints: Failpoints = failpoints) -> str:
            try:
                await failpoints.hit("maintenance:finish:before")
            except asyncio.CancelledError:
                return "cancelled"
            await asyncio.sleep(0)  # it can still await after the swallowed cancellation
            return "went on"

        task = asyncio.create_task(finish())
        await failpoints.reached("maintenance:finish:before")
        task.cancel()
        await asyncio.sleep(0)  # the cancellation is delivered while paused
        failpoints.release("maintenance:finish:before")
        assert await task == outcome
