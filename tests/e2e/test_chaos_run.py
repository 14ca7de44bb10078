"""A reduced ``make chaos``: 200 submissions over 20 threads on 2 worker processes, one fault of
each kind (a worker SIGKILLed, a worker restarted gracefully, PostgreSQL stopped hard, Temporal
SIGKILLed, failpoints inside attempts), run as ``python -m chaos`` in a subprocess with its own
stack. Some submissions delegate to subagent children (``call`` and ``calls`` steps), which
settle before their parents. Every fifth thread's turns go to framework agents (a pydantic-ai
and an OpenAI Agents SDK agent on offline models, `chaos.agents`): two model requests and one
idempotent tool each. The full run's long sends (a message, then 10 s of work:
``--long-send-share``) are left out: each holds its thread for 10 s or more (13 s while the
inline budget still cut its sleep off and it slept again), which tripled this run's time;
``make chaos CHAOS_ARGS="--deploys 8"`` and ``tests/e2e/test_deploys.py`` cover a deploy beside
them.

It must exit 0 with every violation count at 0: nothing lost, admitted twice, settled twice, out
of FIFO order, settled with another outcome than its script dictates, or written under a stale
epoch; every child joined exactly once, and no parent settled before its children.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.checks import VIOLATIONS

ROOT = Path(__file__).resolve().parents[2]
SUBMISSIONS = 200
FAILPOINTS = (
    "attempt:append=0.02,attempt:tool=0.02,claim=0.02,settle=0.02,"
    "attempt:call=0.05,attempt:call-wait:after=0.05,attempt:call-join:after=0.05"
)
"""Likelier than the full run's, so that 200 submissions see some fire."""
RUN_DEADLINE_S = 420


@pytest.mark.no_ledger_check(
    reason="its ledger is the chaos stack's own database, checked by chaos.checks"
)
@pytest.mark.slow
@pytest.mark.xdist_group("slow")  # the long, heavy tests one after another
@pytest.mark.timeout(RUN_DEADLINE_S + 60)
def test_chaos_run_reduced_converges_with_no_violation(tmp_path: Path) -> None:
    argv = [
        *(sys.executable, "-m", "chaos", "--json", "--seed", "3"),
        *("--submissions", str(SUBMISSIONS), "--threads", "20", "--workers", "2"),
        *("--worker-kills", "1", "--postgres-stops", "1", "--temporal-kills", "1"),
        *("--deploys", "1", "--long-send-share", "0"),
        *("--in-flight", "40", "--failpoints", FAILPOINTS),
        *("--timeout", str(RUN_DEADLINE_S), "--keep", str(tmp_path / "run")),
    ]
    done = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=RUN_DEADLINE_S + 30
    )
    lines = done.stdout.strip().splitlines()
    assert lines, f"no output; stderr: {done.stderr[-3000:]}"
    result = json.loads(lines[-1])
    logs = f"{result}\nlogs in {tmp_path / 'run' / 'logs'}; stderr: {done.stderr[-2000:]}"
    assert {name: result[name] for name in VIOLATIONS if result[name]} == {}, logs
    assert (result["submissions"], result["settled"], result["unquiet_hosts"]) == (
        SUBMISSIONS,
        SUBMISSIONS,
        0,
    ), logs
    faults = result["faults"]
    assert (faults["worker_kill"], faults["postgres_stop"], faults["temporal_kill"]) == (1, 1, 1)
    assert (faults["deploy"], result["failed_deploys"]) == (1, 0), logs  # a graceful restart
    assert result["exit_after_sigterm_s"]["over_limit"] == 0, logs
    assert faults["failpoint"] > 0, logs  # THREADWARDEN_FAILPOINTS reached the workers
    assert result["failed_on_purpose"] > 0  # the scripts that fail on purpose did
    assert result["children"] == result["children_settled"] > 0, logs  # delegations ran
    assert result["children_failed_on_purpose"] > 0  # and failed children did not fail parents
    # Every fifth thread's turns went to a pydantic-ai or an Agents SDK agent.
    assert result["agent_turns"] == result["agent_turns_settled"] == SUBMISSIONS // 5, logs
    assert (result["error"], result["ok"], done.returncode) == (None, True, 0), logs
