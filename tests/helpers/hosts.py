"""A host plug-in (`threadwarden.hosts.HostMaintenance`) for tests: it counts its waves, reports
a deadline the test sets, and fails or hangs on demand."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from tests.helpers.cancellation import hang_until_cancelled


class FakeHost:
    """Counts its waves per host (``waves``) and reports ``deadline`` as every host's pending
    deadline. ``failing`` makes the next wave raise; with ``hang`` every wave runs until it is
    cancelled (``cancelled`` notes those), as a wave that ignores the end of native work."""

    def __init__(self, allowance: object = 1_000, *, hang: bool = False) -> None:
        self.dispatch_timeout_ms = allowance
        self.hang = hang
        self.failing = False
        self.deadline: datetime | None = None
        self.waves: Counter[str] = Counter()
        self.cancelled: list[int] = []

    async def wave(self, host_id: str, *, dispatch_until: datetime) -> bool:
        self.waves[host_id] += 1
        if self.failing:
            self.failing = False
            raise RuntimeError("relay down")
        if self.hang:
            await hang_until_cancelled(self.cancelled)
        return False

    async def pending_deadline(self, host_id: str) -> datetime | None:
        return self.deadline
