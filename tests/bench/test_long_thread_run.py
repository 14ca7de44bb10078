"""``python -m bench --shape long-thread`` run for real, tiny: its own stack, every side's turns,
ten deciles each in the JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.long_sides import SIDES
from bench.procs import ROOT, environment

TURNS = 10
"""One turn per decile: the smallest run the shape takes."""


@pytest.mark.slow
@pytest.mark.xdist_group("slow")  # the long, heavy tests one after another
def test_a_tiny_long_thread_run_reports_ten_deciles_per_side(tmp_path: Path) -> None:
    argv = ["--shape", "long-thread", "--turns", str(TURNS), "--json", "--logs", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "bench", *argv],
        cwd=ROOT,
        env=environment({}),
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert (data["shape"], data["turns"]) == ("long-thread", TURNS)
    assert data["sides"].keys() == set(SIDES)
    for name, side in data["sides"].items():
        assert (side["completed"], side["error"]) == (TURNS, None), name
        assert [d["turns"] for d in side["deciles"]] == [[n, n] for n in range(TURNS)], name
        assert all(d["p50_ms"] > 0 for d in side["deciles"]), name
    writes = {
        name: [(d["bytes_written_per_turn"], d["statements_per_turn"]) for d in side["deciles"]]
        for name, side in data["sides"].items()
    }
    assert all(w == (0, 0) for w in writes["bare"])  # its history stays in memory
    for name in ("threadwarden", "langgraph_postgres"):
        assert all(b > 0 and s > 0 for b, s in writes[name]), name
    assert f"{TURNS}/{TURNS} turns" in done.stderr  # progress, decile by decile
