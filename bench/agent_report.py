"""The agent shape's figures (``python -m bench --shape agent``): one repetition of a side, the
medians over repetitions, the JSON object and the readable table with the same figures."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.report import Row, cell, figures, top_statements

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
    """threadwarden only: the Temporal server's and PostgreSQL's CPU over the same turns."""
    model_requests: int = 0
    """Requests the chat server answered for the measured turns (warm-up left out)."""
    statements: int | None = None
    history_events: int | None = None
    error: str | None = None
    top_statements: list[tuple[int, float, str]] = field(default_factory=list)

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
            "completed": self.completed,
            "units": self.units,
            "error": self.error,
        }


MEDIAN_FIELDS = (
    "units_per_s",
    "seconds",
    "cpu_ms_per_unit",
    "model_requests_per_unit",
    "sql_statements_per_unit",
    "history_events_per_unit",
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
    runs: dict[str, list[AgentRun]], *, threads: int, turns: int, workers: int, top: int
) -> dict[str, Any]:
    """The JSON object: medians per side, the throughput ratio threadwarden/bare (and the CPU
    per unit's), and whether any repetition asked the model more often under threadwarden."""
    sides = {name: _summary(runs[name]) for name in SIDES}
    if top:
        sides["threadwarden"]["top_statements"] = [
            {"calls": calls, "total_ms": ms, "query": query}
            for calls, ms, query in runs["threadwarden"][-1].top_statements
        ]
    tw, bare = sides["threadwarden"], sides["bare"]
    return {
        "shape": "agent",
        "hosts": threads,
        "submissions": turns,
        "workers": workers,
        "repeat": len(runs["threadwarden"]),
        "ratio": _ratio(tw["units_per_s"], bare["units_per_s"]),
        "cpu_ratio": _ratio(tw["cpu_ms_per_unit"], bare["cpu_ms_per_unit"]),
        "same_model_requests": all(
            t.model_requests == b.model_requests
            for t, b in zip(runs["threadwarden"], runs["bare"], strict=True)
        ),
        **sides,
    }


def complete(data: dict[str, Any]) -> bool:
    """Every repetition of both sides completed every turn without error, and threadwarden
    asked the model as often as the bare agent (no step asked twice)."""
    return data["same_model_requests"] and all(
        data[name]["completed"] == data[name]["units"] and not data[name]["errors"]
        for name in SIDES
    )


_ROWS: tuple[Row, ...] = (
    ("turns/s", lambda s: s["units_per_s"]),
    ("seconds", lambda s: s["seconds"]),
    ("CPU ms/turn (agent processes)", lambda s: s["cpu_ms_per_unit"]),
    ("  + temporal server", lambda s: s["servers_cpu_ms_per_unit"].get("temporal")),
    ("  + postgres", lambda s: s["servers_cpu_ms_per_unit"].get("postgres")),
    ("model requests/turn", lambda s: s["model_requests_per_unit"]),
    ("SQL statements/turn", lambda s: s["sql_statements_per_unit"]),
    ("history events/turn", lambda s: s["history_events_per_unit"]),
    ("completed (worst rep)", lambda s: f"{s['completed']}/{s['units']}"),
)


def table(data: dict[str, Any]) -> str:
    """Every figure, one row each, medians over the repetitions."""
    lines = [
        f"shape=agent threads={data['hosts']} turns/thread={data['submissions']}"
        f" turns={data['hosts'] * data['submissions']} workers={data['workers']}"
        f" repeat={data['repeat']} (medians over repetitions)",
        *figures(data, _ROWS, SIDES, unit="turns"),
        f"ratio threadwarden/bare (median turns/s): {cell(data['ratio'])}",
        f"ratio threadwarden/bare (median CPU ms/turn): {cell(data['cpu_ratio'])}",
    ]
    if not data["same_model_requests"]:
        lines.append("error: threadwarden and the bare agent sent different model requests")
    for name in SIDES:
        lines += [f"{name}: error: {e}" for e in data[name]["errors"]]
    lines += top_statements("threadwarden", data["threadwarden"].get("top_statements", []))
    return "\n".join(lines)
