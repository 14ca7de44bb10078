"""A step that never finishes by itself: it runs until it is cancelled."""

from __future__ import annotations

import asyncio


async def hang_until_cancelled(cancelled: list[int]) -> None:
    """Wait until cancelled (past any deadline), noting the cancellation in ``cancelled``."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.append(1)
        raise
