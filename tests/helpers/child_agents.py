"""Agents for the subagent-children tests: a ``planner`` that delegates and a ``helper`` it
delegates to. Loaded in-process (``PLANNER``, ``HELPER`` registries) or by a worker process
(``--bindings tests.helpers.child_agents:HELPER``).

``planner`` input: ``{"calls": [{"agent", "input", "thread"?, "host"?}, ...], "together": bool}``
(together: awaited with ``asyncio.gather``, else one after another). It completes with the
outcomes of its calls in order.

``helper`` input: ``{"answer": x}`` completes with ``{"answer": x}``; ``{"fail": reason}``
fails; ``{"approval": reason}`` waits for a person first; ``{"spend": [units, ...]}`` spends
its budget first (an overspend raises `BudgetExceeded`: the helper fails); ``{"call": {...}}``
delegates once more (a grandchild) and completes with that outcome.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from threadwarden.bindings import AttemptContext, Binding, ChildOutcome, Completed, Failed, Outcome


async def _call(context: AttemptContext, call: dict[str, Any]) -> ChildOutcome:
    return await context.call_agent(
        call["agent"],
        call["input"],
        thread_id=call.get("thread"),
        host_id=call.get("host"),
        budget=call.get("budget"),
    )


async def plan(context: AttemptContext) -> Outcome:
    calls = context.input["calls"]
    if context.input.get("together", True):
        outcomes = await asyncio.gather(*(_call(context, call) for call in calls))
    else:
        outcomes = [await _call(context, call) for call in calls]
    return Completed({"children": [dataclasses.asdict(o) for o in outcomes]})


async def help(context: AttemptContext) -> Outcome:
    task = context.input
    if "approval" in task:
        await context.request_approval(task["approval"])
    for units in task.get("spend", []):
        await context.spend(units)
    if "fail" in task:
        return Failed(task["fail"])
    if "call" in task:
        outcome = await _call(context, task["call"])
        return Completed({"grandchild": dataclasses.asdict(outcome)})
    return Completed({"answer": task.get("answer")})


PLANNER_BINDING = Binding(agent_id="planner", digest="planner-v1", handler=plan)
HELPER_BINDING = Binding(agent_id="helper", digest="helper-v1", handler=help)
PLANNER = [PLANNER_BINDING]
HELPER = [HELPER_BINDING]
BOTH = [PLANNER_BINDING, HELPER_BINDING]
