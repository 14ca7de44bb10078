"""The lease keeper beside a running attempt: heartbeats, lease renewals, and the handler's stop
once the attempt's ownership is gone."""

import asyncio
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from temporalio import activity

from threadwarden.failpoints import Failpoints
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.claims import Claim


@dataclass(eq=False, repr=False)
class LeaseKeeper:
    """Keeps one attempt's lease; `lost` says why ownership is gone (None while it holds)."""

    attempts: Attempts
    claim: Claim
    _: KW_ONLY
    failpoints: Failpoints
    lease_s: float
    renew_s: float
    lost: str | None = field(default=None, init=False)

    async def keep(self, handler: asyncio.Future[Any]) -> None:
        """Heartbeat and renew every ``renew_s``; cancel ``handler`` once ownership is gone.

        A renewal that fails is logged and retried at the next interval (heartbeats go on).
        Ownership is gone when a renewal says so, or when renewals kept failing for a whole
        lease since the last one that succeeded: the lease has lapsed and recovery may already
        have taken the head. Never raises.
        """
        claim = self.claim
        loop = asyncio.get_running_loop()
        renewed = loop.time()  # the claim, just before, leased the head for lease_s
        while True:
            await asyncio.sleep(self.renew_s)
            beat()
            try:
                async with asyncio.timeout(self.renew_s):  # a hung renewal is a failed one
                    await self.failpoints.hit("attempt:renew")
                    owned = await self.attempts.renew_lease(claim)
            except Exception as error:
                if loop.time() - renewed < self.lease_s:
                    activity.logger.warning(
                        "lease renewal of attempt %s failed, retrying: %r", claim.attempt_id, error
                    )
                    continue
                self.lost = (
                    f"attempt {claim.attempt_id}: lease renewals failed for {self.lease_s:g} s,"
                    f" so the lease has lapsed (last: {type(error).__name__}: {error})"
                )
            else:
                if owned:
                    renewed = loop.time()  # the lease now runs at least lease_s from here
                    continue
                self.lost = (
                    f"attempt {claim.attempt_id} lost its ownership of submission"
                    f" {claim.submission_id} (a newer pass or attempt took over)"
                )
            activity.logger.warning("%s; stopping the handler", self.lost)
            handler.cancel()
            return


async def stop(keeper: "asyncio.Task[None]") -> None:
    """Stop a keeper's task; whatever became of it never replaces the attempt's outcome."""
    keeper.cancel()
    await asyncio.wait([keeper])


def beat() -> None:
    """Heartbeat the running activity. A local activity (an inline head) has no heartbeat to
    send: the SDK heartbeats its workflow task instead, and cancellation reaches it locally."""
    if not activity.info().is_local:
        activity.heartbeat()
