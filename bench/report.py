"""The bench's output: one JSON object, or a readable table with the same figures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bench.measure import SideRun, summarize
from bench.side import Shape
from threadwarden.worker.embedded import DEV_SERVER_CONFIG

SIDES = ("threadwarden", "baseline")
Row = tuple[str, str | Callable[[dict[str, Any]], Any]]
"""A table row: its label, and its figure in one side's medians: their key for that figure, or
how to pick it."""


def result(runs: dict[str, list[SideRun]], shape: Shape, *, streams: int = 0) -> dict[str, Any]:
    """The JSON object: the ``shape`` run, medians per side over the repetitions, and their
    ratio; ``streams``: the event streams requested beside threadwarden's runs (``--streams``)."""
    sides = {name: summarize(runs[name]) for name in SIDES}
    if shape.top:
        for name in SIDES:
            sides[name]["top_statements"] = [
                {"calls": calls, "total_ms": ms, "query": query}
                for calls, ms, query in runs[name][-1].top_statements
            ]
    base = sides["baseline"]["units_per_s"]
    ratio = round(sides["threadwarden"]["units_per_s"] / base, 3) if base else None
    base_cpu, tw_cpu = (sides[name]["cpu_ms_per_unit"] for name in ("baseline", "threadwarden"))
    cpu_ratio = round(tw_cpu / base_cpu, 3) if base_cpu and tw_cpu is not None else None
    return {
        "shape": "scripted",
        "temporal_config": DEV_SERVER_CONFIG,
        "hosts": shape.hosts,
        "submissions": shape.submissions,
        "workers": shape.workers,
        "streams": streams,
        "repeat": len(runs["threadwarden"]),
        "ratio": ratio,
        "cpu_ratio": cpu_ratio,
        **sides,
    }


def complete(data: dict[str, Any]) -> bool:
    """Whether every repetition of both sides completed every unit, without error, and (with
    ``--streams``) every repetition's streams opened and delivered every record."""
    return all(
        data[name]["completed"] == data[name]["units"]
        and not data[name]["errors"]
        and all(streams_complete(r.get("streams")) for r in data[name]["repetitions"])
        for name in SIDES
    )


def streams_complete(streams: dict[str, Any] | None) -> bool:
    """Every stream opened, none failed or ended, each saw its thread's last record and the
    events add up to every stream's thread's records (None: no streams, nothing to check)."""
    if streams is None:
        return True
    return (
        streams["opened"] == streams["requested"] == streams["caught_up"]
        and streams.get("events_received") == streams.get("events_expected")
        and not streams.get("failed")
        and not streams.get("out_of_order")
        and not streams.get("ended_by_server")
        and not streams["errors"]
    )


def _process(name: str) -> Callable[[dict[str, Any]], Any]:
    """The CPU ms per unit of the processes ``name`` stands for (None: not measured)."""
    return lambda s: s["cpu_ms_per_unit_by_process"].get(name)


_ROWS: tuple[Row, ...] = (
    ("units/s", "units_per_s"),
    ("seconds", "seconds"),
    ("latency p50 ms", lambda s: s["latency_ms"]["p50"]),
    ("latency p95 ms", lambda s: s["latency_ms"]["p95"]),
    ("CPU ms/unit (workers+servers)", "cpu_ms_per_unit"),
    ("  workers", _process("workers")),
    ("  temporal server", _process("temporal")),
    ("  postgres", _process("postgres")),
    ("  bench client (apart)", _process("bench")),
    ("  console (apart)", _process("console")),
    ("  stream clients (apart)", _process("streams")),
    ("Temporal tasks/unit (wf+act)", "temporal_tasks_per_unit"),
    ("  workflow tasks/unit", "workflow_tasks_per_unit"),
    ("  activity tasks/unit", "activity_tasks_per_unit"),
    ("local activities/unit", "local_activities_per_unit"),
    ("SQL statements/unit", "sql_statements_per_unit"),
    ("SQL transactions/unit", "sql_transactions_per_unit"),
    ("pool resets/unit (4 stmts each)", "sql_pool_resets_per_unit"),
    ("history events/unit", "history_events_per_unit"),
    ("sweeper history events", "sweeper_history_events"),
    ("activity timeouts", "activity_timeouts"),
    ("workflow task timeouts", "workflow_task_timeouts"),
    ("activity failures", "activity_failures"),
    ("failed passes (logs)", "failed_passes"),
    ("timeout lines (logs)", "worker_log_timeout_lines"),
    ("completed (worst rep)", lambda s: f"{s['completed']}/{s['units']}"),
)


def _streams(pick: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """A ``--streams`` figure of one side's summary (None on a side without streams)."""
    return lambda s: None if s.get("streams") is None else pick(s["streams"])


_STREAM_ROWS: tuple[Row, ...] = (
    ("event streams open (worst rep)", _streams(lambda t: f"{t['opened']}/{t['requested']}")),
    ("  caught up (worst rep)", _streams(lambda t: t["caught_up"])),
    ("  record events received", _streams(lambda t: t["events_received"])),
    ("  record events expected", _streams(lambda t: t["events_expected"])),
    ("  out of order (gap, repeat)", _streams(lambda t: t.get("out_of_order"))),
    ("  catch-up after the run s", _streams(lambda t: t["catch_up_s"])),
    ("console RSS MiB idle", _streams(lambda t: t["console_rss_idle_mib"])),
    ("  streams open", _streams(lambda t: t["console_rss_open_mib"])),
    ("  peak (VmHWM)", _streams(lambda t: t["console_rss_peak_mib"])),
    ("  end of run", _streams(lambda t: t["console_rss_end_mib"])),
    ("console SQL statements", _streams(lambda t: t.get("console_sql_statements"))),
)


def table(data: dict[str, Any]) -> str:
    """Every figure, one row each, medians over the repetitions."""
    with_streams = any(data[name].get("streams") for name in SIDES)
    lines = [
        f"hosts={data['hosts']} submissions/host={data['submissions']}"
        f" units={data['hosts'] * data['submissions']} workers={data['workers']}"
        + (f" streams={data['streams']}" if data.get("streams") else "")
        + f" repeat={data['repeat']} (medians over repetitions)",
        *figures(data, _ROWS + (_STREAM_ROWS if with_streams else ()), SIDES, unit="units"),
        f"ratio threadwarden/baseline (median units/s): {cell(data['ratio'])}",
        f"CPU ratio threadwarden/baseline (median CPU ms/unit): {cell(data['cpu_ratio'])}",
    ]
    for name in SIDES:
        lines += [f"{name}: error: {e}" for e in data[name]["errors"]]
        lines += [
            f"{name}: stream error: {e}"
            for e in (data[name].get("streams") or {}).get("errors", [])
        ]
        lines += top_statements(name, data[name].get("top_statements", []))
    return "\n".join(lines)


def figures(
    data: dict[str, Any], rows: Sequence[Row], sides: tuple[str, str], *, unit: str
) -> list[str]:
    """The two sides' medians side by side, one row each, then each side's rate per
    repetition (``unit``/s)."""
    left, right = sides
    lines = [f"{'':<32}{left:>14}{right:>14}"]
    for label, pick in rows:
        lines.append(
            f"{label:<32}{cell(_figure(data[left], pick)):>14}"
            f"{cell(_figure(data[right], pick)):>14}"
        )
    for name in sides:
        rates = ", ".join(cell(r["units_per_s"]) for r in data[name]["repetitions"])
        lines.append(f"{name} {unit}/s per repetition: {rates}")
    return lines


def _figure(side: dict[str, Any], pick: str | Callable[[dict[str, Any]], Any]) -> Any:
    """A row's figure in one side's medians."""
    return side[pick] if isinstance(pick, str) else pick(side)


def top_statements(name: str, statements: Sequence[dict[str, Any]]) -> list[str]:
    """The most called statements of a side's last repetition."""
    if not statements:
        return []
    lines = [f"{name}: most called statements (last repetition): calls, total ms, query"]
    lines += [f"  {s['calls']:>7} {s['total_ms']:>9} {s['query']}" for s in statements]
    return lines


def cell(value: object) -> str:
    """One figure as the table shows it."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}" if value < 100 else f"{value:.1f}"
    return str(value)
