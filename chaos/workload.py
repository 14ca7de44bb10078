"""The chaos workload: seeded scripts for the built-in ``scripted`` agent, and what each must leave.

Submission ``n`` of thread ``t`` has the key ``t.n``: its idempotency key and the text of its
first ``say`` step, so the ledger check recognises a submission by its input whatever key it was
admitted under. A script sleeps, calls an ordinary tool (no side effect: a re-run may call it
again, it is never ``unknown``) and says things; some scripts end with ``fail``, the only
submissions that may settle ``failed``. Every script dictates its outcome, its result (or
reason) and the exact canonical records it leaves, in order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

AGENT = "scripted"
TOOL = "lookup"
SLEEPS_MS = (0, 10, 50, 100, 300, 1_000, 2_000)
SLEEP_WEIGHTS = (3, 3, 3, 3, 2, 1, 1)
FAIL_RATIO = 0.1
"""Share of scripts that fail on purpose."""

Record = tuple[str, Any]
"""(kind, body) of one canonical record."""


@dataclass(frozen=True)
class Planned:
    """One submission of the workload: where it goes and the script it runs."""

    key: str
    thread: str
    host: str
    n: int
    """Its place in its thread's order of submission (0 first)."""
    steps: list[dict[str, Any]]

    @property
    def outcome(self) -> str:
        return "failed" if any("fail" in step for step in self.steps) else "completed"

    def settlement(self) -> dict[str, Any]:
        """The body of the one settlement record the script must end with."""
        said: list[str] = []
        for step in self.steps:
            if "fail" in step:
                return {"outcome": "failed", "result": None, "reason": step["fail"]}
            if "say" in step:
                said.append(step["say"])
        return {"outcome": "completed", "result": {"said": said}, "reason": None}

    def records(self) -> list[Record]:
        """The canonical records the script writes before its settlement, in order."""
        written: list[Record] = []
        for step in self.steps:
            if "fail" in step:
                break
            if "say" in step:
                written.append(("message", {"text": step["say"]}))
            elif "tool" in step:
                call = {"tool": TOOL, "args": step["args"], "side_effect": False}
                written.append(("tool-call", {**call, "idempotency_key": None}))
                result = {"ok": True, "echo": step["args"]}
                written.append(("tool-result", {"tool": TOOL, "result": result}))
        return written


def thread_name(index: int) -> str:
    return f"chaos-t{index:03d}"


def host_name(index: int) -> str:
    """Threads 4k and 4k+1 share one host (two lanes); every other thread has its own."""
    pair = index // 2
    return f"chaos-h{pair:03d}" if pair % 2 == 0 else f"chaos-h{pair:03d}-{index % 2}"


def plan_workload(submissions: int, threads: int, seed: int) -> list[Planned]:
    """``submissions`` spread round-robin over ``threads``, each with its seeded script."""
    planned = []
    for number in range(submissions):
        index, n = number % threads, number // threads
        thread = thread_name(index)
        key = f"{thread}.{n}"
        rng = random.Random(f"{seed}/{key}")
        planned.append(Planned(key, thread, host_name(index), n, _script(key, rng)))
    return planned


def _script(key: str, rng: random.Random) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [{"say": key}]
    for k in range(rng.randint(0, 3)):
        kind = rng.choice(("sleep", "tool", "say"))
        if kind == "sleep":
            steps.append({"sleep_ms": rng.choices(SLEEPS_MS, SLEEP_WEIGHTS)[0]})
        elif kind == "tool":
            steps.append({"tool": TOOL, "args": {"key": key, "k": k}})
        else:
            steps.append({"say": f"{key} says {k}"})
    if rng.random() < FAIL_RATIO:
        steps.append({"fail": f"{key} fails on purpose"})
        steps.append({"say": f"{key} must never say this"})
    return steps
