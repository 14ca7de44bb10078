"""Figures of one measured side, their medians over repetitions, and a deadline-bound poll."""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

POLL_INTERVAL_S = 0.02
"""Granularity of every poll (completion, readiness, quiescence), the same on both sides."""


async def wait_until(
    probe: Callable[[], Awaitable[T]], accept: Callable[[T], bool], *, timeout_s: float, what: str
) -> T:
    """Call ``probe`` until ``accept`` holds on its result; raise `TimeoutError` at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await probe()
        if accept(value):
            return value
        if loop.time() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout_s}s; last value: {value!r}")
        await asyncio.sleep(POLL_INTERVAL_S)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0–100) by linear interpolation; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class HistoryCounts:
    """What a side's Temporal histories show (`bench.history.count`)."""

    events: int = 0
    sweeper_events: int = 0
    activity_timeouts: int = 0
    workflow_task_timeouts: int = 0
    activity_failures: int = 0
    workflow_tasks: int = 0
    activity_tasks: int = 0
    local_activities: int = 0
    runs: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    """The measured workflows' events by type (``WORKFLOW_TASK_STARTED``, …)."""
    workflow_task_problems: dict[str, int] = field(default_factory=dict)
    """Workflow tasks timed out by timeout type, and failed by cause (``timed_out:START_TO_CLOSE``,
    ``failed:UNHANDLED_COMMAND``, …)."""


@dataclass
class SideRun:
    """What one repetition measured on one side. Per-unit figures divide by ``units``."""

    side: str
    units: int
    completed: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    statements: int = 0
    transactions: int = 0
    pool_resets: int = 0
    history: HistoryCounts = field(default_factory=HistoryCounts)
    log_timeout_lines: int = 0
    failed_passes: int = 0
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds of the measured phase by process group (`bench.cpu`): ``workers``,
    ``temporal``, ``postgres`` (the headline sums these) and ``bench`` (the client)."""
    error: str | None = None
    """Why the side did not finish (deadline, a worker died), or None."""
    top_statements: list[tuple[int, float, str]] = field(default_factory=list)
    """(calls, total ms, query) of the most called statements, for ``--top``."""
    streams: dict[str, Any] | None = None
    """With ``--streams``: what the event streams received and the console's memory
    (`bench.streams.StreamWatch.finish`), and its statements; None without."""

    @property
    def units_per_s(self) -> float:
        return self.completed / self.seconds if self.seconds > 0 else 0.0

    def _per_unit(self, value: float) -> float:
        return round(value / self.units, 2)

    def figures(self) -> dict[str, Any]:
        served = sum(self.cpu_s.get(name, 0.0) for name in CPU_SERVING)
        history = self.history
        return {
            "units_per_s": round(self.units_per_s, 2),
            "seconds": round(self.seconds, 3),
            "cpu_ms_per_unit": self._per_unit(1000 * served) if self.cpu_s else None,
            "cpu_ms_per_unit_by_process": {
                name: self._per_unit(1000 * seconds) for name, seconds in self.cpu_s.items()
            },
            "temporal_tasks_per_unit": self._per_unit(
                history.workflow_tasks + history.activity_tasks
            ),
            "workflow_tasks_per_unit": self._per_unit(history.workflow_tasks),
            "activity_tasks_per_unit": self._per_unit(history.activity_tasks),
            "local_activities_per_unit": self._per_unit(history.local_activities),
            "history_events_per_unit_by_type": {
                name: self._per_unit(n) for name, n in sorted(history.by_type.items())
            },
            "latency_ms": {
                "p50": _round(percentile(self.latencies_ms, 50)),
                "p95": _round(percentile(self.latencies_ms, 95)),
            },
            "sql_statements_per_unit": round(self.statements / self.units, 2),
            "sql_transactions_per_unit": round(self.transactions / self.units, 2),
            "sql_pool_resets_per_unit": round(self.pool_resets / self.units, 2),
            "history_events_per_unit": round(history.events / self.units, 2),
            "sweeper_history_events": history.sweeper_events,
            "activity_timeouts": history.activity_timeouts,
            "workflow_task_timeouts": history.workflow_task_timeouts,
            "workflow_task_problems": history.workflow_task_problems,
            "activity_failures": history.activity_failures,
            "worker_log_timeout_lines": self.log_timeout_lines,
            "failed_passes": self.failed_passes,
            "completed": self.completed,
            "units": self.units,
            "error": self.error,
            "streams": self.streams,
        }


CPU_SERVING = ("workers", "temporal", "postgres")
"""The process groups whose CPU a unit costs (the bench's own client is reported apart)."""


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


MEDIAN_FIELDS = (
    "units_per_s",
    "seconds",
    "cpu_ms_per_unit",
    "temporal_tasks_per_unit",
    "workflow_tasks_per_unit",
    "activity_tasks_per_unit",
    "local_activities_per_unit",
    "sql_statements_per_unit",
    "sql_transactions_per_unit",
    "sql_pool_resets_per_unit",
    "history_events_per_unit",
    "sweeper_history_events",
    "activity_timeouts",
    "workflow_task_timeouts",
    "activity_failures",
    "worker_log_timeout_lines",
    "failed_passes",
)


def summarize(runs: Sequence[SideRun]) -> dict[str, Any]:
    """Medians over repetitions; ``completed`` is the worst repetition's, errors are listed."""
    each = [run.figures() for run in runs]
    summary: dict[str, Any] = {key: _median([f[key] for f in each]) for key in MEDIAN_FIELDS}
    summary["latency_ms"] = {
        q: _median([f["latency_ms"][q] for f in each if f["latency_ms"][q] is not None])
        for q in ("p50", "p95")
    }
    for figure in ("cpu_ms_per_unit_by_process", "history_events_per_unit_by_type"):
        summary[figure] = _median_by_key([f[figure] for f in each])
    summary["streams"] = summarize_streams([run.streams for run in runs])
    summary["completed"] = min(run.completed for run in runs)
    summary["units"] = runs[0].units
    summary["errors"] = [run.error for run in runs if run.error is not None]
    summary["repetitions"] = each
    return summary


STREAMS_WORST = ("requested", "opened", "caught_up")
"""Stream figures summarized by their worst (smallest) repetition, not the median."""


def summarize_streams(runs: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """``--streams`` figures over the repetitions that have them: medians, the worst for
    `STREAMS_WORST`, every repetition's errors; None without any."""
    known = [r for r in runs if r is not None]
    if not known:
        return None
    summary: dict[str, Any] = {}
    for key in known[0]:
        if key == "errors":
            summary[key] = [error for r in known for error in r.get("errors", [])]
            continue
        values = [r[key] for r in known if isinstance(r.get(key), int | float)]
        if not values:
            summary[key] = None
        elif key in STREAMS_WORST:
            summary[key] = min(values)
        else:
            summary[key] = round(statistics.median(values), 2)
    return summary


def _median_by_key(figures: Sequence[dict[str, float]]) -> dict[str, float | None]:
    """Per key, the median over the repetitions that have it."""
    keys = dict.fromkeys(key for figure in figures for key in figure)
    return {key: _median([f[key] for f in figures if key in f]) for key in keys}


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known else None
