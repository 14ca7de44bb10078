"""The bench's argument parsing, figures and output shape (no services needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import cpu, report
from bench.cli import parse_args
from bench.measure import HistoryCounts, SideRun, percentile
from bench.procs import log_counts
from bench.side import Shape
from bench.sqlstats import Counters, is_transaction_control, transactions
from bench.stack import with_user

SIDE_KEYS = {
    "units_per_s",
    "latency_ms",
    "sql_statements_per_unit",
    "sql_transactions_per_unit",
    "history_events_per_unit",
    "activity_timeouts",
    "completed",
    "units",
}


def test_defaults() -> None:
    args = parse_args([])
    assert (args.hosts, args.submissions, args.workers, args.repeat) == (4, 25, 1, 3)
    assert args.timeout == 300.0 and not args.json


@pytest.mark.parametrize(
    "argv",
    [
        ["--hosts", "0"],
        ["--submissions", "-1"],
        ["--workers", "two"],
        ["--repeat", "0"],
        ["--timeout", "0"],
        ["--timeout", "nan"],
        ["--bogus"],
    ],
)
def test_bad_values_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        parse_args(argv)
    assert stop.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1


def _run(
    side: str, rate_seconds: float, *, completed: int = 10, error: str | None = None
) -> SideRun:
    run = SideRun(side, 10, completed=completed, seconds=rate_seconds, error=error)
    run.latencies_ms = [float(n) for n in range(1, 11)]
    run.statements, run.transactions, run.history.events = 150, 40, 90
    return run


def test_json_shape_medians_and_ratio(shape: Shape) -> None:
    runs = {
        "threadwarden": [_run("threadwarden", s) for s in (1.0, 2.0, 4.0)],
        "baseline": [_run("baseline", s) for s in (0.5, 0.25, 1.0)],
    }
    data = report.result(runs, shape)
    json.dumps(data)  # serialisable
    assert {"hosts", "submissions", "workers", "repeat", "ratio"} <= data.keys()
    assert data["shape"] == "scripted"
    assert data["repeat"] == 3
    for side in report.SIDES:
        assert data[side].keys() >= SIDE_KEYS
    assert data["threadwarden"]["units_per_s"] == 5.0  # median of 10, 5, 2.5
    assert data["baseline"]["units_per_s"] == 20.0
    assert data["ratio"] == 0.25
    assert data["threadwarden"]["sql_statements_per_unit"] == 15.0
    assert data["threadwarden"]["latency_ms"] == {"p50": 5.5, "p95": 9.6}  # rounded to 0.1 ms
    assert report.complete(data)
    assert "ratio threadwarden/baseline" in report.table(data)


def test_cpu_per_unit_sums_workers_and_servers_and_reports_each_process(shape: Shape) -> None:
    def run(side: str, scale: float) -> SideRun:
        measured = _run(side, 1.0)
        measured.cpu_s = {
            "workers": 0.5 * scale,
            "temporal": 0.2 * scale,
            "postgres": 0.1 * scale,
            "bench": 0.3,
        }
        measured.history = HistoryCounts(workflow_tasks=20, activity_tasks=10, local_activities=30)
        return measured

    runs = {
        "threadwarden": [run("threadwarden", s) for s in (1.0, 2.0, 3.0)],
        "baseline": [run("baseline", s) for s in (0.5, 1.0, 1.5)],
    }
    data = report.result(runs, shape)

    tw = data["threadwarden"]
    assert tw["cpu_ms_per_unit"] == 160.0  # median 2x (500 + 200 + 100 ms) / 10 units
    assert tw["cpu_ms_per_unit_by_process"] == {
        "workers": 100.0,
        "temporal": 40.0,
        "postgres": 20.0,
        "bench": 30.0,  # reported, not in the headline
    }
    assert data["cpu_ratio"] == 2.0
    assert (tw["temporal_tasks_per_unit"], tw["local_activities_per_unit"]) == (3.0, 3.0)
    assert "CPU ratio threadwarden/baseline" in report.table(data)


def test_cpu_snapshot_counts_a_process_tree_and_its_reaped_children() -> None:
    before = cpu.snapshot({"me": [os.getpid()]}, alone=[os.getpid()])
    # The child spins 0.35 s of its own clock; /proc counts it in whole 10 ms ticks, and a
    # float sum of ticks can fall a hair short of 0.3 (seen: 0.29999999999999716 for 0.3 s).
    busy = "import time\nend = time.process_time() + 0.35\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", busy], check=True)  # reaped: in our cutime
    after = cpu.snapshot({"me": [os.getpid()]}, alone=[os.getpid()])

    spent = cpu.used(before, after)
    assert spent["me"] >= 0.3  # the child's 0.35 s (to a tick or two), and ours
    assert spent["bench"] < spent["me"] - 0.25  # alone: without the child


def test_a_timed_out_repetition_is_reported_incomplete(shape: Shape) -> None:
    late = _run("threadwarden", 120.0, completed=4, error="timeout: 4/10 units settled")
    runs = {
        "threadwarden": [_run("threadwarden", 1.0), late, _run("threadwarden", 1.0)],
        "baseline": [_run("baseline", 1.0)] * 3,
    }
    data = report.result(runs, shape)
    assert data["threadwarden"]["completed"] == 4
    assert data["threadwarden"]["errors"] == ["timeout: 4/10 units settled"]
    assert not report.complete(data)
    assert "threadwarden: error: timeout" in report.table(data)


def test_transaction_control_statements() -> None:
    for query in ("BEGIN", "begin;", "BEGIN ISOLATION LEVEL SERIALIZABLE;", "COMMIT", "ROLLBACK"):
        assert is_transaction_control(query)
    for query in ("ROLLBACK TO SAVEPOINT s", "SAVEPOINT s", "SELECT 1", "BEGINNING"):
        assert not is_transaction_control(query)


def test_transactions_leave_out_session_starts_and_the_observer() -> None:
    assert transactions(Counters(100, 10), Counters(190, 14), observer_calls=30) == 56


def test_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5


def test_with_user() -> None:
    dsn = "postgresql://postgres:@/bench?host=/tmp/pg"
    assert with_user(dsn, "bench_observer") == "postgresql://bench_observer@/bench?host=/tmp/pg"


def test_log_counts_count_records_not_tracebacks(tmp_path: Path) -> None:
    log = tmp_path / "worker0.stderr"
    log.write_text(
        "2026-11-30 23:21:29,682 WARNING temporalio.workflow: pass failed on host h1:"
        " activity Heartbeat timeout ({'attempt': 1})\n"
        "Traceback (most recent call last):\n"
        "    self.connection = await self.pool._acquire(self.timeout)\n"
        "asyncio.exceptions.TimeoutError\n"
        "2026-11-30 23:21:30,119 WARNING temporalio.workflow: pass failed on host h2: boom\n"
    )
    assert log_counts([log]) == (1, 2)
