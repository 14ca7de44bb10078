"""What the suite costs, said at its end: one line naming the slowest 10 tests and the CPU the
whole machine spent while it ran (the test processes, the shared PostgreSQL and Temporal, the
browsers: everything), and, with ``SUITE_COST_FILE=FILE``, every test file's wall time
and its test processes' CPU as JSON.

Each test's process CPU (user + system, its own and its reaped children's) is measured around
its setup, call and teardown where it runs (an xdist worker) and carried to the controller on
its teardown report; the wall time is the three phases' durations. A fixture shared by several
tests counts against the first that sets it up. The machine's CPU is read from ``/proc/stat``
at the start and the end of the session (on a machine shared with other work it counts that
too: measure on a quiet one).
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

SLOWEST = 10
COST_FILE = "SUITE_COST_FILE"
_STARTED = pytest.StashKey[float]()
_PROPERTY = "process_cpu_s"


def _process_cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def machine_cpu_s() -> float | None:
    """CPU seconds every process of the machine has spent since boot (None off Linux)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
    ticks = [int(value) for value in fields[:8]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


class SuiteCost:
    """The pytest plugin: measures where tests run, tallies and reports where the run ends."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.machine_at_start = machine_cpu_s()
        self.started = time.monotonic()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        item.stash[_STARTED] = _process_cpu_s()
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        started = item.stash.get(_STARTED, None)
        if call.when == "teardown" and started is not None:
            report: pytest.TestReport = outcome.get_result()
            report.user_properties.append((_PROPERTY, _process_cpu_s() - started))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.wall[report.nodeid] += report.duration
        for name, value in report.user_properties:
            if name == _PROPERTY and isinstance(value, float):
                self.cpu[report.nodeid] += value

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.wall:
            return
        slowest = sorted(self.wall.items(), key=lambda pair: -pair[1])[:SLOWEST]
        named = ", ".join(f"{nodeid} {seconds:.1f}s" for nodeid, seconds in slowest)
        terminalreporter.write_line(f"slowest {len(slowest)}: {named}")
        at_end = machine_cpu_s()
        if self.machine_at_start is not None and at_end is not None:
            wall = time.monotonic() - self.started
            spent = at_end - self.machine_at_start
            terminalreporter.write_line(
                f"machine CPU while the suite ran: {spent:.0f} s in {wall:.0f} s"
                f" ({os.cpu_count()} cores); the test processes' own:"
                f" {sum(self.cpu.values()):.0f} s"
            )
        target = os.environ.get(COST_FILE)
        if target:
            Path(target).write_text(json.dumps(self.by_file(), indent=1) + "\n")

    def by_file(self) -> dict[str, dict[str, float]]:
        """Each test file's wall time and process CPU, in seconds, costliest first."""
        files: dict[str, dict[str, float]] = defaultdict(lambda: {"wall_s": 0.0, "cpu_s": 0.0})
        for nodeid, seconds in self.wall.items():
            files[nodeid.split("::", 1)[0]]["wall_s"] += seconds
        for nodeid, seconds in self.cpu.items():
            files[nodeid.split("::", 1)[0]]["cpu_s"] += seconds
        ranked = sorted(files.items(), key=lambda pair: -pair[1]["wall_s"])
        return {name: {k: round(v, 2) for k, v in cost.items()} for name, cost in ranked}
