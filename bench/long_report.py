"""The long-thread shape's figures (``python -m bench --shape long-thread``): each side's ten
deciles, how its last decile compares with its first, the JSON object and the readable table."""

from __future__ import annotations

import statistics
from typing import Any

from bench.agent_report import percentiles
from bench.long_sides import DECILES, SIDES, LongRun, LongShape, decile_edges
from bench.long_support import KEEP_TURNS
from bench.measure import percentile
from bench.report import cell
from threadwarden.worker.embedded import DEV_SERVER_CONFIG

P50_BOUND = 1.2
BYTES_BOUND = 1.1
"""Issue 37's bounds on threadwarden's last decile against its first: p50 latency, bytes
written per turn."""
SLOWEST = 5
"""How many of a side's slowest turns the JSON names (turn counted from 0, ms)."""
TAIL_BOUND = 3.0
"""Issue 39's bound on threadwarden's slowest turn against its median turn."""


def deciles(run: LongRun) -> list[dict[str, Any]]:
    """The run's deciles that it finished: turns (first and last, counted from 0), latency p50
    and p95, and per turn the WAL bytes written, the tables' growth and the statements."""
    edges = decile_edges(run.turns)
    out: list[dict[str, Any]] = []
    for k in range(DECILES):
        first, end = edges[k], edges[k + 1]
        if end > run.completed or k + 1 >= len(run.edges) or end == first:
            break
        latencies = run.latencies_ms[first:end]
        delta = run.edges[k + 1] - run.edges[k]
        count = end - first

        def per_turn(value: int, count: int = count) -> float:
            return round(value / count, 1)

        def bytes_per_turn(value: int, count: int = count) -> int:
            return round(value / count)

        out.append(
            {
                "turns": [first, end - 1],
                "p50_ms": round(statistics.median(latencies), 1),
                "p95_ms": _round(percentile(latencies, 95)),
                "bytes_written_per_turn": bytes_per_turn(delta.wal_bytes),
                "table_bytes_per_turn": bytes_per_turn(delta.table_bytes),
                "statements_per_turn": per_turn(delta.statements),
            }
        )
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _growth(rows: list[dict[str, Any]], key: str) -> float | None:
    """The last decile's figure over the first's (None without both, or from nothing)."""
    if len(rows) < DECILES or not rows[0][key]:
        return None
    return round(float(rows[-1][key]) / float(rows[0][key]), 3)


def side(run: LongRun) -> dict[str, Any]:
    rows = deciles(run)
    turn_ms = percentiles(run.latencies_ms[: run.completed])
    return {
        "turn_ms": turn_ms,
        "max_over_p50": (
            round(turn_ms["max"] / turn_ms["p50"], 2) if turn_ms and turn_ms["p50"] else None
        ),
        "slowest_turns": [
            [n, round(ms, 1)]
            for n, ms in sorted(enumerate(run.latencies_ms), key=lambda t: -t[1])[:SLOWEST]
        ],
        "turns": run.turns,
        "completed": run.completed,
        "seconds": round(run.seconds, 2),
        "error": run.error,
        "deciles": rows,
        "growth": {key: _growth(rows, key) for key in ("p50_ms", "bytes_written_per_turn")},
        **({} if run.records is None else run.records),
    }


def result(runs: dict[str, LongRun], shape: LongShape) -> dict[str, Any]:
    """The JSON object: the shape, threadwarden's memory, each side's deciles and growth, and
    whether threadwarden is within issue 37's bounds (``within_bounds``)."""
    sides = {name: side(runs[name]) for name in SIDES}
    growth = sides["threadwarden"]["growth"]
    p50, written = growth["p50_ms"], growth["bytes_written_per_turn"]
    return {
        "shape": "long-thread",
        "temporal_config": DEV_SERVER_CONFIG,
        "turns": shape.turns,
        "memory": {"budget_tokens": shape.budget_tokens, "keep_turns": KEEP_TURNS},
        "bounds": {"p50_ms": P50_BOUND, "bytes_written_per_turn": BYTES_BOUND},
        "within_bounds": (
            None if p50 is None or written is None else p50 <= P50_BOUND and written <= BYTES_BOUND
        ),
        "tail_bound": TAIL_BOUND,
        "within_tail_bound": (
            None if (tail := sides["threadwarden"]["max_over_p50"]) is None else tail <= TAIL_BOUND
        ),
        "sides": sides,
    }


def complete(data: dict[str, Any]) -> bool:
    """Every side ran every turn without error."""
    return all(s["completed"] == s["turns"] and s["error"] is None for s in data["sides"].values())


_COLUMNS = (
    ("p50 ms", "p50_ms"),
    ("bytes/turn", "bytes_written_per_turn"),
    ("stmts/turn", "statements_per_turn"),
)


def table(data: dict[str, Any]) -> str:
    """One row per decile; per side its p50, WAL bytes and statements per turn."""
    memory = data["memory"]
    lines = [
        f"shape=long-thread turns={data['turns']} one thread; threadwarden memory"
        f" budget_tokens={memory['budget_tokens']} keep_turns={memory['keep_turns']}",
        f"{'':<12}" + "".join(f"{name:>36}" for name in SIDES),
        f"{'turns':<12}" + "".join(f"{h:>12}" for _ in SIDES for h, _ in _COLUMNS),
    ]
    rows = {name: data["sides"][name]["deciles"] for name in SIDES}
    for k in range(max(len(r) for r in rows.values())):
        span = next(r[k]["turns"] for r in rows.values() if len(r) > k)
        cells = [
            cell(rows[name][k][key]) if len(rows[name]) > k else "-"
            for name in SIDES
            for _, key in _COLUMNS
        ]
        lines.append(f"{span[0]:>5}-{span[1]:<6}" + "".join(f"{c:>12}" for c in cells))
    for name in SIDES:
        s = data["sides"][name]
        growth = s["growth"]
        lines.append(
            f"{name}: last decile / first: p50 x{cell(growth['p50_ms'])},"
            f" bytes/turn x{cell(growth['bytes_written_per_turn'])};"
            f" {s['completed']}/{s['turns']} turns in {cell(s['seconds'])} s"
            + (f"; {s['records']} records, {s['summaries']} summaries" if "records" in s else "")
        )
        if s["turn_ms"]:
            turn = s["turn_ms"]
            lines.append(
                f"{name}: turn p50 {cell(turn['p50'])} ms, p95 {cell(turn['p95'])} ms,"
                f" max {cell(turn['max'])} ms (max / p50 x{cell(s['max_over_p50'])})"
            )
        if s["error"]:
            lines.append(f"{name}: error: {s['error']}")
    within = data["within_bounds"]
    lines.append(
        f"threadwarden within p50 x{P50_BOUND}, bytes/turn x{BYTES_BOUND}:"
        f" {'-' if within is None else 'yes' if within else 'no'}"
    )
    return "\n".join(lines)
