"""The faults of a chaos run: a seeded order of process faults, and the failpoints' log trail.

Process faults are injected one at a time by `inject`: a worker SIGKILLed (and a new one
started in its slot), a deploy (a worker SIGTERMed, waited for, bounded, and a new one started
in its slot: `ChaosWorkers.deploy`), PostgreSQL stopped with ``pg_ctl stop -m immediate`` and
started again on its data dir after an outage, the Temporal server SIGKILLed and started again
on its database file and port after an outage. Failpoints fire inside the workers
(``THREADWARDEN_FAILPOINTS``); each one that fired failed a pass (or a lease renewal), logged in
one line naming the error.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from chaos.stack import ChaosStack
from chaos.workers import ChaosWorkers

Fault = Literal["worker_kill", "postgres_stop", "temporal_kill", "deploy"]
DEFAULT_FAILPOINTS = (
    "attempt:append=0.01,attempt:tool=0.01,attempt:renew=0.01,claim=0.005,settle=0.005,"
    "maintenance:begin:after=0.002,maintenance:finish:before=0.002,"
    "attempt:call=0.03,attempt:call:after=0.03,attempt:call-wait:after=0.03,"
    "attempt:call-join=0.03,attempt:call-join:after=0.03"
)
"""Failpoints armed in every worker (each incarnation with a seed of its own)."""
FIRED_LINES = (
    re.compile(r"pass failed on host \S+: .*?FailpointError: ([\w:-]+)"),
    re.compile(r"lease renewal of attempt \S+ failed, retrying: FailpointError\('([\w:-]+)'\)"),
)
"""A pass that a failpoint failed, in the workflow's log (once per failure, not on replay); a
lease renewal that one failed (retried at the next interval, the pass goes on)."""


def plan_faults(
    *, worker_kills: int, postgres_stops: int, temporal_kills: int, seed: int, deploys: int = 0
) -> list[Fault]:
    """The process faults in a seeded order, with the ``deploys`` spread evenly among them
    (deploy ``j`` of ``d`` at place ``⌊(2j+1)·k/2d⌋`` of the ``k`` faults); the other kinds
    keep the order they have without deploys."""
    counts: dict[Fault, int] = {
        "worker_kill": worker_kills,
        "postgres_stop": postgres_stops,
        "temporal_kill": temporal_kills,
    }
    others = [fault for fault, count in counts.items() for _ in range(count)]
    random.Random(seed).shuffle(others)
    total = len(others) + deploys
    at = {(2 * j + 1) * total // (2 * deploys) for j in range(deploys)}
    rest = iter(others)
    return ["deploy" if place in at else next(rest) for place in range(total)]


async def inject(
    fault: Fault, stack: ChaosStack, workers: ChaosWorkers, *, victim: int, outage_s: float
) -> None:
    """Inject one fault and restore the service it broke; ``victim`` picks the worker."""
    if fault == "worker_kill":
        await workers.kill(victim)
    elif fault == "deploy":
        await workers.deploy(victim)
    elif fault == "postgres_stop":
        await stack.postgres.stop_immediately()
        await asyncio.sleep(outage_s)  # the outage itself, not a wait for anything
        await stack.postgres.restart()
    else:
        await stack.temporal.kill()
        await asyncio.sleep(outage_s)
        await stack.temporal.restart()


def failpoints_fired(stderr_files: Sequence[Path]) -> dict[str, int]:
    """How often each failpoint failed a pass, from the workers' logs."""
    fired: Counter[str] = Counter()
    for path in stderr_files:
        if path.exists():
            for line in path.read_text(errors="replace").splitlines():
                for pattern in FIRED_LINES:
                    match = pattern.search(line)
                    if match:
                        fired[match.group(1)] += 1
    return dict(sorted(fired.items()))
