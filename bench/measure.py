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
    history_events: int = 0
    sweeper_events: int = 0
    activity_timeouts: int = 0
    workflow_task_timeouts: int = 0
    activity_failures: int = 0
    log_timeout_lines: int = 0
    failed_passes: int = 0
    error: str | None = None
    """Why the side did not finish (deadline, a worker died), or None."""
    top_statements: list[tuple[int, float, str]] = field(default_factory=list)
    """(calls, total ms, query) of the most called statements, for ``--top``."""

    @property
    def units_per_s(self) -> float:
        return self.completed / self.seconds if self.seconds > 0 else 0.0

    def figures(self) -> dict[str, Any]:
        return {
            "units_per_s": round(self.units_per_s, 2),
            "seconds": round(self.seconds, 3),
            "latency_ms": {
                "p50": _round(percentile(self.latencies_ms, 50)),
                "p95": _round(percentile(self.latencies_ms, 95)),
            },
            "sql_statements_per_unit": round(self.statements / self.units, 2),
            "sql_transactions_per_unit": round(self.transactions / self.units, 2),
            "sql_pool_resets_per_unit": round(self.pool_resets / self.units, 2),
            "history_events_per_unit": round(self.history_events / self.units, 2),
            "sweeper_history_events": self.sweeper_events,
            "activity_timeouts": self.activity_timeouts,
            "workflow_task_timeouts": self.workflow_task_timeouts,
            "activity_failures": self.activity_failures,
            "worker_log_timeout_lines": self.log_timeout_lines,
            "failed_passes": self.failed_passes,
            "completed": self.completed,
            "units": self.units,
            "error": self.error,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


MEDIAN_FIELDS = (
    "units_per_s",
    "seconds",
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
    summary["completed"] = min(run.completed for run in runs)
    summary["units"] = runs[0].units
    summary["errors"] = [run.error for run in runs if run.error is not None]
    summary["repetitions"] = each
    return summary


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None
