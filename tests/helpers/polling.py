"""Poll with a deadline instead of sleeping."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T]],
    accept: Callable[[T], bool],
    *,
    timeout_s: float = 30,
    what: str = "condition",
) -> T:
    """Call ``probe`` until ``accept`` holds; at the deadline fail showing the last value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await probe()
        if accept(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"{what} not reached within {timeout_s}s; last value: {value!r}")
        await asyncio.sleep(0.05)
