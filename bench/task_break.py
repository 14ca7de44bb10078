"""``python -m bench.task_break``: what it costs a workflow to end its workflow task and be given
the next one, by each means a workflow has (issue 39).

The host workflow ends a workflow task on purpose three times: after 5 s of passes chained in
one task, when its head's worker stops, and before continuing as new. Each time the run waits
for something the server delivers in a new workflow task. One probe workflow per means takes
``--tries`` such breaks in a row on a headless dev server of its own; a break's latency is, from
the probe's history, the time from the task's WORKFLOW_TASK_COMPLETED to the next task's
WORKFLOW_TASK_STARTED (the wait alone: the task's own work is the same whatever the means),
reported as nearest-rank p50, p95 and max.

- ``timer``: a 1 ms timer (``workflow.sleep``), as before issue 39;
- ``timer, time shift 10 ms``: the same on a server whose ``history.timerProcessorMaxTimeShift``
  (1 s by default, production clusters included) is 10 ms;
- ``activity``: a regular activity that does nothing, on the workflow's own task queue (the
  worker's default: eager execution requested);
- ``activity, not eager``: the same on a worker that never requests eager execution;
- ``signal to self``: a signal to the workflow's own execution (``SignalExternal...``).

Prints one line per means (p50/p95/max in ms), or with ``--json`` one object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.exceptions import FailureError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.agent_report import percentiles
from threadwarden.worker.embedded import TemporalDevServer

PROBE = "TaskBreakProbe"
NOOP = "task_break_noop"
SELF_SIGNAL = "task_break"
TIME_SHIFT: dict[str, object] = {"history.timerProcessorMaxTimeShift": "10ms"}
"""The server option that moves timers: tasks due sooner than now + this shift are moved to it."""


@activity.defn(name=NOOP)
async def noop() -> None:
    """The activity a break waits for: nothing to do."""


@workflow.defn(name=PROBE)
class TaskBreakProbe:
    """Takes ``tries`` breaks of one means in a row, each ending a workflow task; returns the
    failure that stopped it, if one did."""

    def __init__(self) -> None:
        self._signals = 0

    @workflow.signal(name=SELF_SIGNAL)
    def signalled(self) -> None:
        self._signals += 1

    @workflow.run
    async def run(self, means: str, tries: int) -> str | None:
        for n in range(1, tries + 1):
            try:
                await self._break(means, n)
            except FailureError as error:
                return f"{type(error).__name__}: {error}"
        return None

    async def _break(self, means: str, n: int) -> None:
        if means.startswith("timer"):
            await workflow.sleep(timedelta(milliseconds=1))
        elif means.startswith("activity"):
            await workflow.execute_activity(NOOP, start_to_close_timeout=timedelta(seconds=10))
        else:
            own = workflow.get_external_workflow_handle(workflow.info().workflow_id)
            await own.signal(SELF_SIGNAL)
            await workflow.wait_condition(lambda: self._signals >= n)


@dataclass(frozen=True)
class Means:
    """One way of ending a workflow task, and how the probe's server and worker are set."""

    name: str
    shifted: bool = False
    """On the server with `TIME_SHIFT`."""
    eager: bool = True
    """The worker requests eager execution of its activities (the SDK's default)."""


MEANS = (
    Means("timer"),
    Means("timer, time shift 10 ms", shifted=True),
    Means("activity"),
    Means("activity, not eager", eager=False),
    Means("signal to self"),
)


@dataclass(frozen=True)
class Measured:
    """One means' breaks (ms), or the failure that stopped its probe."""

    means: str
    tries: int
    p50_ms: float | None
    p95_ms: float | None
    max_ms: float | None
    events_per_break: float | None
    error: str | None = None


def gaps_ms(events: Sequence[HistoryEvent]) -> list[float]:
    """From each WORKFLOW_TASK_COMPLETED to the next WORKFLOW_TASK_STARTED, in ms."""
    gaps: list[float] = []
    completed = None
    for event in events:
        kind, at = event.event_type, event.event_time.ToDatetime()
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            completed = at
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and completed is not None:
            gaps.append((at - completed).total_seconds() * 1000)
            completed = None
    return gaps


async def probe(client: Client, means: Means, tries: int) -> Measured:
    """Run one probe on a worker of its own task queue; its breaks from its history."""
    queue = f"task-break-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[TaskBreakProbe],
        activities=[noop],
        workflow_runner=UnsandboxedWorkflowRunner(),
        disable_eager_activity_execution=not means.eager,
    ):
        handle = await client.start_workflow(
            PROBE, args=[means.name, tries], id=queue, task_queue=queue
        )
        error = await handle.result()
        events = list((await handle.fetch_history()).events)
    gaps = gaps_ms(events)
    quantiles = percentiles(gaps)
    if error is not None or quantiles is None:
        return Measured(means.name, tries, None, None, None, None, error or "no break")
    return Measured(
        means.name,
        len(gaps),
        quantiles["p50"],
        quantiles["p95"],
        quantiles["max"],
        round(between_breaks(events) / len(gaps), 2),
    )


def between_breaks(events: Sequence[HistoryEvent]) -> int:
    """Events after the first workflow task up to the end of the last (the breaks' own)."""
    completed = [
        i
        for i, e in enumerate(events)
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]
    return completed[-1] - completed[0]


@contextlib.asynccontextmanager
async def dev_server(dynamic_config: dict[str, object]) -> AsyncIterator[Client]:
    server = TemporalDevServer(None, ui=False, dynamic_config=dynamic_config)
    try:
        yield await server.start()
    finally:
        server.stop()


async def measure(tries: int, report: Callable[[Measured], None]) -> list[Measured]:
    """Every means in `MEANS`, in order, each reported as soon as it is measured."""
    results = []
    for shifted in (False, True):
        async with dev_server(TIME_SHIFT if shifted else {}) as client:
            for means in (m for m in MEANS if m.shifted == shifted):
                results.append(await probe(client, means, tries))
                report(results[-1])
    order = [m.name for m in MEANS]
    return sorted(results, key=lambda r: order.index(r.means))


def _line(result: Measured) -> str:
    if result.error is not None:
        return f"{result.means:<26} failed: {result.error}"
    return (
        f"{result.means:<26} p50 {result.p50_ms:>7.1f}  p95 {result.p95_ms:>7.1f}"
        f"  max {result.max_ms:>7.1f} ms  ({result.tries} breaks,"
        f" {result.events_per_break} events each)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.task_break", description=__doc__)
    parser.add_argument("--tries", type=int, default=50, help="breaks per means (default 50)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    if args.tries < 1:
        parser.error(f"--tries: expected a positive integer, got {args.tries}")

    def report(result: Measured) -> None:
        print(_line(result), file=sys.stderr if args.json else sys.stdout, flush=True)

    results = asyncio.run(measure(args.tries, report))
    if args.json:
        print(json.dumps({"tries": args.tries, "means": [asdict(r) for r in results]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
