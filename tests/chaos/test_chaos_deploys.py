"""Deploys in a chaos run: planned beside the other faults, spread over the run; a deploy's
graceful restart and its exit time on stand-in worker processes; the flags and the report (no
services needed)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench.procs import WorkerCommand
from bench.threadwarden_run import READY
from chaos import workers as chaos_workers
from chaos.checks import Counts
from chaos.cli import LONG_SEND_SHARE, parse_args
from chaos.faults import plan_faults
from chaos.report import report
from chaos.run import Options, Outcome
from chaos.workers import EXIT_DEADLINE_S, ChaosWorkers


def test_deploys_are_planned_counted_and_spread_beside_the_other_faults() -> None:
    others = plan_faults(worker_kills=3, postgres_stops=2, temporal_kills=1, seed=4)
    faults = plan_faults(worker_kills=3, postgres_stops=2, temporal_kills=1, seed=4, deploys=8)
    assert Counter(faults) == Counter(
        {"deploy": 8, "worker_kill": 3, "postgres_stop": 2, "temporal_kill": 1}
    )
    assert [fault for fault in faults if fault != "deploy"] == others  # their order kept
    assert faults == plan_faults(
        worker_kills=3, postgres_stops=2, temporal_kills=1, seed=4, deploys=8
    )
    # Spread evenly: fault i of k strikes at (i + 1) / (k + 1) of the run, so deploy places
    # evenly apart are deploys evenly over the run.
    places = [i for i, fault in enumerate(faults) if fault == "deploy"]
    assert places == [0, 2, 4, 6, 7, 9, 11, 13]
    assert max(b - a for a, b in zip(places, places[1:], strict=False)) <= 2


@pytest.mark.parametrize(
    ("deploys", "others", "expected"),
    [
        (0, 6, 0),
        (1, 0, 1),
        (1, 6, 1),
        (2, 0, 2),
        (3, 1, 3),
        (8, 0, 8),
        (5, 20, 5),
    ],
)
def test_deploys_keep_their_count_and_take_no_place_twice(
    deploys: int, others: int, expected: int
) -> None:
    faults = plan_faults(
        worker_kills=others, postgres_stops=0, temporal_kills=0, seed=1, deploys=deploys
    )
    assert len(faults) == deploys + others
    assert (faults.count("deploy"), faults.count("worker_kill")) == (expected, others)
    places = [i for i, fault in enumerate(faults) if fault == "deploy"]
    if len(places) > 1:  # no two deploys further apart than the even spacing (rounded up)
        gap = -(-len(faults) // deploys)
        assert max(b - a for a, b in zip(places, places[1:], strict=False)) <= gap
        assert places[0] < gap and places[-1] >= len(faults) - gap


def test_flags_deploys_and_long_send_share(capsys: pytest.CaptureFixture[str]) -> None:
    options = parse_args([])
    assert (options.deploys, options.long_send_share) == (0, 0.0)  # the run as it was
    assert parse_args(["--deploys", "8"]).long_send_share == LONG_SEND_SHARE == 0.15
    assert parse_args(["--deploys", "2", "--long-send-share", "0"]).long_send_share == 0.0
    assert parse_args(["--long-send-share", "0.5"]).long_send_share == 0.5
    assert parse_args(["--long-send-share", "1"]).deploys == 0
    capsys.readouterr()
    for bad in (
        ["--deploys", "-1"],
        ["--deploys", "two"],
        ["--deploys", "1.5"],
        ["--long-send-share", "1.5"],
        ["--long-send-share", "-0.1"],
        ["--long-send-share", "nan"],
        ["--long-send-share", "lots"],
    ):
        with pytest.raises(SystemExit) as stop:
            parse_args(bad)
        assert stop.value.code == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
        assert len(errors) == 1
        assert errors[0].startswith(f"python -m chaos: error: argument {bad[0]}:")


STAND_IN = "import signal, sys, time\n{setup}print('worker on task queue chaos', flush=True)\n"
"""A stand-in worker: says it polls, then waits (``setup`` decides how it meets SIGTERM)."""
GRACEFUL = "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
STUBBORN = "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"


def stand_ins(tmp_path: Path, setup: str) -> ChaosWorkers:
    script = STAND_IN.format(setup=setup) + "time.sleep(600)\n"
    command = WorkerCommand([sys.executable, "-c", script], {}, READY)
    return ChaosWorkers(lambda slot, incarnation: command, 2, tmp_path / "logs")


async def test_a_deploy_restarts_the_worker_and_times_its_exit(tmp_path: Path) -> None:
    workers = stand_ins(tmp_path, GRACEFUL)
    await workers.start()
    try:
        first = workers._slots[1].process
        await workers.deploy(1)
        assert workers._slots[1].process is not first and workers._slots[1].incarnation == 2
        assert first is not None and first.returncode == 0  # it exited by itself
        assert workers._slots[0].incarnation == 1
        assert len(workers.deploy_exits) == 1 and 0 <= workers.deploy_exits[0] < 10
        assert (workers.failed_deploys, workers.unplanned_exits) == (0, 0)
    finally:
        await workers.stop()
    assert len(workers.stop_exits) == 2 and max(workers.stop_exits) < 10


async def test_a_worker_that_outlives_the_deadline_is_killed_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chaos_workers, "EXIT_DEADLINE_S", 0.5)
    workers = stand_ins(tmp_path, STUBBORN)
    await workers.start()
    try:
        await workers.deploy(0)
        assert workers.failed_deploys == 1 and workers.deploy_exits[0] > 0.5
        assert workers._slots[0].incarnation == 2
    finally:
        await workers.stop()
    assert len(workers.stop_exits) == 2 and min(workers.stop_exits) > 0.5  # SIGKILLed too


def test_report_lists_exit_times_and_fails_a_run_with_a_slow_exit(tmp_path: Path) -> None:
    def reported(deploys: list[float], stops: list[float], failed: int = 0) -> dict[str, Any]:
        workers = ChaosWorkers(lambda slot, incarnation: WorkerCommand([], {}, READY), 2, tmp_path)
        workers.deploy_exits, workers.stop_exits = deploys, stops
        workers.failed_deploys = failed
        outcome = Outcome()
        outcome.faults["deploy"] = len(deploys)
        return report(Options(deploys=len(deploys)), Counts(), outcome, {}, 0, workers, 1.0)

    quick = reported([1.234, 0.5], [2.0, 3.0])
    assert quick["exit_after_sigterm_s"] == {
        "deploys": [1.23, 0.5],
        "final_stop": [2.0, 3.0],
        "max": 3.0,
        "over_limit": 0,
        "limit": EXIT_DEADLINE_S,
    }
    assert (quick["failed_deploys"], quick["ok"]) == (0, True)
    assert quick["faults"]["deploy"] == 2
    slow_stop = reported([1.0], [EXIT_DEADLINE_S + 0.01])
    assert slow_stop["exit_after_sigterm_s"]["over_limit"] == 1
    assert slow_stop["ok"] is False
    failed = reported([EXIT_DEADLINE_S + 2], [1.0], failed=1)
    assert (failed["failed_deploys"], failed["ok"]) == (1, False)
    assert reported([], [])["exit_after_sigterm_s"]["max"] is None
