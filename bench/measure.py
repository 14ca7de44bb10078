"""Timing helpers shared by both sides: a deadline-bound poll and one side's measurement."""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

POLL_INTERVAL_S = 0.02
"""Granularity of completion polling, the same on both sides."""


@dataclass(frozen=True)
class Measurement:
    """Wall time for ``units`` units of work, from the first submit to the last completion."""

    side: str
    units: int
    seconds: float

    @property
    def rate(self) -> float:
        """Units per second."""
        return self.units / self.seconds if self.seconds > 0 else float("inf")


async def wait_until(
    probe: Callable[[], Awaitable[T]], accept: Callable[[T], bool], *, timeout_s: float, what: str
) -> T:
    """Call ``probe`` until ``accept`` holds on its result; raise `TimeoutError` at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await probe()
        if accept(value):
            return value
        if loop.time() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout_s}s; last value: {value!r}")
        await asyncio.sleep(POLL_INTERVAL_S)
