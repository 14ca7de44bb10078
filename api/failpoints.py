"""Failpoints: named places at every durable boundary where a test can inject a fault.

Production code calls ``await failpoints.hit("maintenance:begin:before")``; unarmed, that is one
dict lookup. A test arms a location to raise, or to pause until released::

    failpoints = Failpoints()
    failpoints.arm("claim", raise_error=RuntimeError("disk full"))
    failpoints.arm("maintenance:finish:before", pause=True)
    await failpoints.reached("maintenance:finish:before")   # the pass is now paused there
    ...                                                      # commit a racing mutation
    failpoints.release("maintenance:finish:before")

Application authors pass the same object to the worker (``running_worker(..., failpoints=fp)``)
to test their own bindings against faults. A worker process can also be armed from a spec string
(setting ``THREADWARDEN_FAILPOINTS``, see `Failpoints.from_spec`), which the chaos run uses::

    attempt:append=0.02,claim=0.01:seed=7
"""

import asyncio
import random
from dataclasses import dataclass, field

from threadwarden.errors import InvalidInput

PASS_PHASES = ("dirty", "mutation", "ensure", "begin", "select", "binding-retry", "retry", "finish")
LOCATIONS: frozenset[str] = frozenset(
    {f"maintenance:{phase}:{edge}" for phase in PASS_PHASES for edge in ("before", "after")}
    | {"maintenance:mutation:armed", "maintenance:mutation:finished", "claim", "settle"}
    | {"projection", "delivery:accept"}
    | {"attempt:append", "attempt:tool", "attempt:send_message", "attempt:renew"}
    | {"attempt:checkpoint"}
    | {
        f"attempt:{step}{edge}"
        for step in ("call", "call-wait", "call-join")
        for edge in ("", ":after")
    }
    | {"attempt:child-abort:after"}
)
"""Every location threadwarden hits; arming anything else is an error (a typo would never fire)."""


class FailpointError(RuntimeError):
    """The default error an armed failpoint raises (an infrastructure fault, never the
    binding's own failure)."""


@dataclass
class _Armed:
    error: BaseException | None
    pause: bool
    times: int | None
    probability: float = 1.0
    stalled: bool = False
    released: asyncio.Event = field(default_factory=asyncio.Event)
    hits: int = 0
    reached: asyncio.Event = field(default_factory=asyncio.Event)


class Failpoints:
    """A set of armed failpoints; one instance is shared by a worker's activities and client."""

    def __init__(self, *, seed: int | None = None) -> None:
        self._random = random.Random(seed)
        self._armed: dict[str, _Armed] = {}
        self._paused: dict[str, _Armed] = {}
        self.hits: dict[str, int] = {}
        """How often each armed location was hit (tests read it)."""

    def arm(
        self,
        location: str,
        *,
        raise_error: BaseException | None = None,
        pause: bool = False,
        times: int | None = None,
        observe: bool = False,
        probability: float = 1.0,
        stalled: bool = False,
    ) -> None:
        """Arm ``location``: raise (``FailpointError`` unless ``raise_error``), or pause, or
        (``observe``) only count its hits in `hits`.

        ``times`` limits how often it fires (None: until disarmed); ``probability`` makes each
        hit fire with that chance (drawn from the instance's seeded generator). A ``stalled``
        pause does not end when its task is cancelled: it stands for a worker that has not
        heard of the cancellation yet (a zombie), and goes on once released.
        """
        if location not in LOCATIONS:
            raise InvalidInput("location", f"one of {sorted(LOCATIONS)}", location)
        if not 0 < probability <= 1:
            raise InvalidInput("probability", "a number in (0, 1]", probability)
        fails = raise_error is None and not pause and not observe
        error = FailpointError(location) if fails else raise_error
        self._armed[location] = _Armed(
            error=error, pause=pause, times=times, probability=probability, stalled=stalled
        )

    @classmethod
    def from_spec(cls, spec: str) -> "Failpoints":
        """Failpoints armed from ``location=probability`` pairs separated by commas, with an
        optional ``:seed=N`` suffix; each armed location raises `FailpointError`.

        An empty spec arms nothing. A malformed spec raises `InvalidInput` naming
        ``failpoints``.
        """
        body, _, seed_part = spec.strip().partition(":seed=")
        try:
            seed = int(seed_part) if seed_part else None
        except ValueError:
            raise InvalidInput("failpoints", "':seed=' followed by an integer", spec) from None
        failpoints = cls(seed=seed)
        for item in filter(None, (part.strip() for part in body.split(","))):
            location, sep, chance = item.rpartition("=")
            try:
                probability = float(chance)
            except ValueError:
                probability = -1.0
            if not sep or location not in LOCATIONS or not 0 < probability <= 1:
                raise InvalidInput(
                    "failpoints", "location=probability pairs (a known location, 0 < p <= 1)", item
                )
            failpoints.arm(location, probability=probability)
        return failpoints

    def disarm(self, location: str) -> None:
        """Stop firing at ``location`` (a paused hit is released first)."""
        for table in (self._armed, self._paused):
            armed = table.pop(location, None)
            if armed is not None:
                armed.released.set()

    def release(self, location: str) -> None:
        """Let a pass paused at ``location`` continue (and disarm it)."""
        self.disarm(location)

    def release_all(self) -> None:
        """Disarm everything and let every paused pass continue (e.g. before a worker stops)."""
        for location in list(self._armed) + list(self._paused):
            self.disarm(location)

    async def reached(self, location: str, *, timeout_s: float = 30) -> None:
        """Wait until ``location`` has been hit while armed."""
        armed = self._armed.get(location) or self._paused.get(location)
        if armed is None:
            if self.hits.get(location):
                return  # a one-shot failpoint that already fired
            raise InvalidInput("location", "an armed failpoint", location)
        await asyncio.wait_for(armed.reached.wait(), timeout_s)

    async def hit(self, location: str) -> None:
        """Called by threadwarden at ``location``; a no-op unless armed."""
        if not self._armed:
            return
        armed = self._armed.get(location)
        if armed is None:
            return
        if armed.probability < 1 and self._random.random() >= armed.probability:
            return
        armed.hits += 1
        self.hits[location] = self.hits.get(location, 0) + 1
        if armed.times is not None and armed.hits >= armed.times:
            self._armed.pop(location, None)
        armed.reached.set()
        if armed.pause:
            self._paused[location] = armed
            await (_stalled(armed.released) if armed.stalled else armed.released.wait())
        if armed.error is not None:
            raise armed.error


async def _stalled(released: asyncio.Event) -> None:
    """Wait for ``released``, ignoring cancellation meanwhile (the cancellation is consumed)."""
    while not released.is_set():
        try:
            await asyncio.shield(released.wait())
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
