"""The payloads of the pass's auxiliary activities (the publication drain, message delivery,
host waves, the projection backfill) and of the sweeper: one pydantic model in and one out per
activity, as in `threadwarden.workflows.contracts`."""

from datetime import datetime

from pydantic import BaseModel


class PublicationResult(BaseModel):
    published: int
    pending: datetime | None
    """Set while a required sink still has unpublished records: native work waits."""


class DeliverInput(BaseModel):
    host_id: str
    dispatch_until: datetime


class DeliverResult(BaseModel):
    delivered: int = 0
    retried: int = 0
    rejected: int = 0
    more: bool = False
    """The batch was full: more messages may be due (delivered by the next batch or pass)."""


class HostWaveInput(BaseModel):
    host_id: str
    dispatch_until: datetime
    allowance_ms: int
    """The validated whole-wave allowance (recorded on the wave's span)."""
    take_host_work: bool = False
    """Take the host's due work mark before the wave (put back if the wave fails)."""


class HostWaveResult(BaseModel):
    more: bool


class BackfillResult(BaseModel):
    refreshed: int = 0
    timed_out: bool = False


class SweeperInput(BaseModel):
    iterations: int = 0


class SweepInput(BaseModel):
    limit: int = 500


class SweepResult(BaseModel):
    woken: int
    interval_ms: int
