"""The agent shape's figures (``python -m bench --shape agent``): one repetition of a side, the
medians over repetitions, the JSON object and the readable table with the same figures."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.report import Row, cell, figures, top_statements
from bench.side import Shape
from threadwarden.worker.embedded import DEV_SERVER_CONFIG

SIDES = ("threadwarden", "bare")


@dataclass
class AgentRun:
    """What one repetition measured on one side. Per-unit figures divide by ``units``; the
    bare side has no SQL and no Temporal history (None)."""

    side: str
    units: int
    completed: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    """CPU of the process(es) running the agent (the bare process, or the workers), user +
    system, over the measured turns only."""
    servers_cpu_s: dict[str, float] = field(default_factory=dict)
    """threadwarden only: the Temporal server's and PostgreSQL's CPU over the same turns; with
    readers (``--stream``) also the console's and the reader process's, apart."""
    model_requests: int = 0
    """Requests the chat server answered for the measured turns (warm-up left out)."""
    statements: int | None = None
    history_events: int | None = None
    error: str | None = None
    top_statements: list[tuple[int, float, str]] = field(default_factory=list)
    turn_ms: list[float] | None = None
    """Per measured turn, ms from its start to its end. threadwarden: from the turn's start (its
    submit, or its thread's previous turn's settlement if later) to its ``settled_at``; bare:
    ``agent.run``'s duration. None when the side could not report them (it failed)."""
    first_delta_ms: list[float] | None = None
    """``--stream``: per turn, the time to the first text a reader got. threadwarden: from the
    turn's start (its submit, or its thread's previous turn's settlement if later) to the first
    ``event: delta`` of the turn at an event-stream reader; bare: from ``agent.run`` to the first
    streamed chunk of the answer's text. None without ``--stream`` (or without readers)."""
    turns_without_delta: int | None = None
    """threadwarden with readers: measured turns of which no reader got a delta."""
    deltas_received: int | None = None
    """threadwarden with readers: ``event: delta`` messages, all readers."""
    restarted_steps: int | None = None
    """threadwarden with readers: steps whose live text started over (``"restart": true``: a
    step cut off mid-answer and run again, its model asked twice); 0 expected."""
    console_statements: int | None = None
    """threadwarden with readers: the console process's statements (counted apart)."""

    @property
    def units_per_s(self) -> float:
        return self.completed / self.seconds if self.seconds > 0 else 0.0

    def figures(self) -> dict[str, Any]:
        def per_unit(value: float | None) -> float | None:
            return None if value is None else round(value / self.units, 2)

        return {
            "units_per_s": round(self.units_per_s, 2),
            "seconds": round(self.seconds, 3),
            "cpu_ms_per_unit": per_unit(1000 * self.cpu_s),
            "servers_cpu_ms_per_unit": {
                name: per_unit(1000 * seconds) for name, seconds in self.servers_cpu_s.items()
            },
            "model_requests": self.model_requests,
            "model_requests_per_unit": per_unit(self.model_requests),
            "sql_statements_per_unit": per_unit(self.statements),
            "history_events_per_unit": per_unit(self.history_events),
            "turn_ms": percentiles(self.turn_ms),
            "first_delta_ms": percentiles(self.first_delta_ms),
            "turns_without_delta": self.turns_without_delta,
            "deltas_per_unit": per_unit(self.deltas_received),
            "restarted_steps": self.restarted_steps,
            "console_sql_statements_per_unit": per_unit(self.console_statements),
            "completed": self.completed,
            "units": self.units,
            "error": self.error,
        }


QUANTILES = {"p50": 0.5, "p95": 0.95, "max": 1.0}
"""The latency figures of a repetition (nearest rank); a side reports their medians."""


def percentiles(values: Sequence[float] | None) -> dict[str, float] | None:
    """p50, p95 and max of ``values`` (nearest rank), ms, and their number; None without
    any."""
    if not values:
        return None
    ranked = sorted(values)

    def rank(q: float) -> float:
        return round(ranked[min(len(ranked) - 1, max(0, math.ceil(q * len(ranked)) - 1))], 1)

    return {**{name: rank(q) for name, q in QUANTILES.items()}, "n": len(ranked)}


MEDIAN_FIELDS = (
    "units_per_s",
    "seconds",
    "cpu_ms_per_unit",
    "model_requests_per_unit",
    "sql_statements_per_unit",
    "history_events_per_unit",
    "deltas_per_unit",
    "console_sql_statements_per_unit",
)


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 2) if present else None


def _summary(runs: Sequence[AgentRun]) -> dict[str, Any]:
    each = [run.figures() for run in runs]
    summary: dict[str, Any] = {key: _median([f[key] for f in each]) for key in MEDIAN_FIELDS}
    servers = [f["servers_cpu_ms_per_unit"] for f in each]
    summary["servers_cpu_ms_per_unit"] = {
        name: _median([b.get(name) for b in servers])
        for name in dict.fromkeys(n for b in servers for n in b)
    }
    for key in ("turn_ms", "first_delta_ms"):
        latencies = [f[key] for f in each if f[key] is not None]
        summary[key] = (
            {q: _median([p[q] for p in latencies]) for q in QUANTILES} if latencies else None
        )
    missing = [run.turns_without_delta for run in runs if run.turns_without_delta is not None]
    summary["turns_without_delta"] = max(missing) if missing else None
    restarted = [run.restarted_steps for run in runs if run.restarted_steps is not None]
    summary["restarted_steps"] = sum(restarted) if restarted else None
    summary["completed"] = min(run.completed for run in runs)
    summary["units"] = runs[0].units
    summary["errors"] = [run.error for run in runs if run.error is not None]
    summary["repetitions"] = each
    return summary


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 3)


def result(
    runs: dict[str, list[AgentRun]], shape: Shape, *, stream: bool = False, readers: int = 0
) -> dict[str, Any]:
    """The JSON object: the ``shape`` run (``hosts`` threads of ``submissions`` turns), medians
    per side, the throughput ratio threadwarden/bare (and the CPU per unit's), and whether any
    repetition asked the model more often under threadwarden. With ``stream`` (``--stream``,
    ``readers`` per thread): each side's time to first delta (`AgentRun.first_delta_ms`), their
    ratio, and whether threadwarden's p50 is within issue 31's budget (1.5 × the bare agent's +
    50 ms)."""
    sides = {name: _summary(runs[name]) for name in SIDES}
    if shape.top:
        sides["threadwarden"]["top_statements"] = [
            {"calls": calls, "total_ms": ms, "query": query}
            for calls, ms, query in runs["threadwarden"][-1].top_statements
        ]
    tw, bare = sides["threadwarden"], sides["bare"]
    tw_first = (tw["first_delta_ms"] or {}).get("p50")
    bare_first = (bare["first_delta_ms"] or {}).get("p50")
    budget = None if bare_first is None else round(1.5 * bare_first + 50, 1)
    return {
        "shape": "agent",
        "temporal_config": DEV_SERVER_CONFIG,
        "hosts": shape.hosts,
        "submissions": shape.submissions,
        "workers": shape.workers,
        "repeat": len(runs["threadwarden"]),
        "stream": stream,
        "readers": readers if stream else 0,
        "ratio": _ratio(tw["units_per_s"], bare["units_per_s"]),
        "cpu_ratio": _ratio(tw["cpu_ms_per_unit"], bare["cpu_ms_per_unit"]),
        "first_delta_ratio": _ratio(tw_first, bare_first),
        "first_delta_budget_ms": budget,
        "first_delta_within_budget": (
            None if tw_first is None or budget is None else tw_first <= budget
        ),
        "same_model_requests": all(
            t.model_requests == b.model_requests
            for t, b in zip(runs["threadwarden"], runs["bare"], strict=True)
        ),
        **sides,
    }


def complete(data: dict[str, Any]) -> bool:
    """Every repetition of both sides completed every turn without error, and threadwarden
    asked the model as often as the bare agent (no step asked twice); with readers, every turn
    reached them as live text and no step's text started over (counted: 0, not unknown)."""
    tw = data["threadwarden"]
    streamed = not data.get("readers") or (
        tw["turns_without_delta"] == 0 and tw.get("restarted_steps") == 0
    )
    return (
        data["same_model_requests"]
        and streamed
        and all(
            data[name]["completed"] == data[name]["units"] and not data[name]["errors"]
            for name in SIDES
        )
    )


def _quantile(key: str, quantile: str) -> Any:
    return lambda s: (s[key] or {}).get(quantile)


def _quantiles(label: str, key: str) -> tuple[Row, ...]:
    """A distribution's rows: its `QUANTILES` (p50, p95, max), ms."""
    return tuple((f"{label} {q} ms", _quantile(key, q)) for q in QUANTILES)


def _server(name: str) -> Callable[[dict[str, Any]], Any]:
    """A server's CPU ms per turn (None: not measured)."""
    return lambda s: s["servers_cpu_ms_per_unit"].get(name)


_ROWS: tuple[Row, ...] = (
    ("turns/s", "units_per_s"),
    ("seconds", "seconds"),
    ("CPU ms/turn (agent processes)", "cpu_ms_per_unit"),
    ("  + temporal server", _server("temporal")),
    ("  + postgres", _server("postgres")),
    ("model requests/turn", "model_requests_per_unit"),
    ("SQL statements/turn", "sql_statements_per_unit"),
    ("history events/turn", "history_events_per_unit"),
    *_quantiles("turn", "turn_ms"),
    ("completed (worst rep)", lambda s: f"{s['completed']}/{s['units']}"),
)
_STREAM_ROWS: tuple[Row, ...] = (
    *_quantiles("first delta", "first_delta_ms"),
    ("turns without a delta (worst)", "turns_without_delta"),
    ("deltas/turn at the readers", "deltas_per_unit"),
    ("steps restarted (all reps)", "restarted_steps"),
    ("  console CPU ms/turn (apart)", _server("console")),
    ("  readers CPU ms/turn (apart)", _server("readers")),
    ("  console SQL/turn (apart)", "console_sql_statements_per_unit"),
)


def table(data: dict[str, Any]) -> str:
    """Every figure, one row each, medians over the repetitions."""
    streamed = bool(data.get("stream"))
    rows = _ROWS + _STREAM_ROWS if streamed else _ROWS
    lines = [
        f"shape=agent threads={data['hosts']} turns/thread={data['submissions']}"
        f" turns={data['hosts'] * data['submissions']} workers={data['workers']}"
        f" repeat={data['repeat']}"
        + (f" stream readers/thread={data['readers']}" if streamed else "")
        + " (medians over repetitions)",
        *figures(data, rows, SIDES, unit="turns"),
        f"ratio threadwarden/bare (median turns/s): {cell(data['ratio'])}",
        f"ratio threadwarden/bare (median CPU ms/turn): {cell(data['cpu_ratio'])}",
    ]
    if streamed:
        within = data["first_delta_within_budget"]
        lines.append(
            f"ratio threadwarden/bare (first delta p50): {cell(data['first_delta_ratio'])};"
            f" budget 1.5 x bare + 50 ms = {cell(data['first_delta_budget_ms'])} ms:"
            f" {'-' if within is None else 'within' if within else 'over'}"
        )
        if data.get("readers") and data["threadwarden"]["turns_without_delta"]:
            lines.append(
                "error: some turns reached no reader as live text (does the agent stream?)"
            )
        if data.get("readers") and data["threadwarden"].get("restarted_steps"):
            lines.append("error: some steps started over (cut off mid-answer and run again)")
    if not data["same_model_requests"]:
        lines.append("error: threadwarden and the bare agent sent different model requests")
    for name in SIDES:
        lines += [f"{name}: error: {e}" for e in data[name]["errors"]]
    lines += top_statements("threadwarden", data["threadwarden"].get("top_statements", []))
    return "\n".join(lines)
