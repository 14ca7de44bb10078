"""Host waves: application obligations that share a host's alarm (UI relays, outboxes, …).

A worker may carry one `HostMaintenance` plug-in. Every maintenance pass of every host runs it
beside the native work: one initial wave (even on a caught-up pass), then further waves while the
native work is still running and the plug-in reports more to do. The plug-in declares a
*whole-wave allowance*, ``dispatch_timeout_ms``; it is validated each time a pass runs (an
integer in 1..300,000). A wave is admitted only if the allowance fits before the pass's
``dispatch_until``; once the native work finishes, the running wave is joined for at most
min(allowance, time left before ``dispatch_until``) and then cancelled; the pass waits until the
cancelled wave has ended (two waves of a host never overlap), at most until the wave's activity
times out (``dispatch_until`` + 10 s), after which the host's next wave on that worker fails
with `HostWaveStillRunning` while the old one runs. A timeout is not a failure; a wave that
raises fails the pass, after the native opportunity. The plug-in's ``pending_deadline`` joins
the host's alarm.

New host work is recorded durably with ``ThreadwardenClient.host_work_due(host_id, at)``: a mark
on the host row armed with the alarm in one statement (the host is not made dirty), so it gets
its wave even when the wake is lost. The first wave of a pass that finds the mark due takes it;
a wave that fails or is cut off puts it back.
"""

from datetime import datetime
from typing import Protocol

from threadwarden.errors import ThreadwardenError

MAX_ALLOWANCE_MS = 300_000
ALLOWANCE_ERROR = "host dispatch allowance"
ALLOWANCE_EXPECTED = "Declare an integer whole-wave allowance between 1 and 300000 milliseconds"


class HostAllowanceInvalid(ThreadwardenError):
    """The plug-in declared an allowance outside 1..300,000 ms (or not an integer)."""


class HostMaintenance(Protocol):
    """What an application implements to run its own obligations on the host's alarm."""

    @property
    def dispatch_timeout_ms(self) -> object:
        """The whole-wave allowance in milliseconds: an integer in 1..300,000."""
        ...

    async def wave(self, host_id: str, *, dispatch_until: datetime) -> bool:
        """Run one bounded wave of work for ``host_id``; True when more work is waiting.

        Cancelled (``asyncio.CancelledError``) when it outlives its allowance after the native
        work finished; it must leave its own state consistent when that happens.
        """
        ...

    async def pending_deadline(self, host_id: str) -> datetime | None:
        """When ``host_id`` next needs a wave (None when nothing is pending)."""
        ...


def validate_allowance(value: object) -> int:
    """The declared allowance as an int, or `HostAllowanceInvalid` saying what is expected."""
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and float(value).is_integer()
        and 1 <= value <= MAX_ALLOWANCE_MS
    ):
        return int(value)
    raise HostAllowanceInvalid(f"{ALLOWANCE_ERROR}: {ALLOWANCE_EXPECTED} (got {value!r})")


class HostWaveStillRunning(ThreadwardenError):
    """A wave of the host ignored its cancellation and still runs on this worker: no new wave
    of that host starts beside it (the pass fails and is retried with durable backoff)."""
