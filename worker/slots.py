"""One budget of activity slots shared by a process's workers (its task queue and the agent
queues of its bindings), so that adding a binding does not multiply what the process takes on."""

from __future__ import annotations

import asyncio
import threading
from collections import deque

from temporalio.worker import (
    CustomSlotSupplier,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
)


class SharedSlots(CustomSlotSupplier):
    """At most ``slots`` activity slots reserved at once across every worker that uses it.

    The SDK reserves a slot before each poll (an idle poller holds one), so the budget counts
    the pollers too (see `ThreadwardenPlugin.activity_slots`). Release may be called from the
    SDK's own thread: the counter is locked and a waiter is woken through its loop.
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("slots: expected at least 1")
        self.slots = slots
        self._lock = threading.Lock()
        self._free = slots
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    @property
    def reserved(self) -> int:
        """Slots reserved now (by polls waiting for a task and by running tasks)."""
        with self._lock:
            return self.slots - self._free

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free > 0:
                self._free -= 1
                return SlotPermit()
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            with self._lock:
                try:
                    self._waiters.remove((loop, waiter))
                    handed = False
                except ValueError:  # a release already handed this waiter its slot
                    handed = True
            if handed:
                self._give_back()
            raise
        return SlotPermit()

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:
        with self._lock:
            if self._free == 0:
                return None
            self._free -= 1
        return SlotPermit()

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        pass

    def release_slot(self, ctx: SlotReleaseContext) -> None:
        self._give_back()

    def _give_back(self) -> None:
        with self._lock:
            if not self._waiters:
                self._free += 1
                return
            loop, waiter = self._waiters.popleft()
        loop.call_soon_threadsafe(_wake, waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
