"""A test binding whose side-effecting tool holds on its first run, so a test can kill the worker
between the tool's prepare (the ``tool-call`` record) and its result.

Load it in a worker process with ``--bindings tests.helpers.slow_tool:BINDING``. The tool appends
one line to the file named by the input's ``ledger`` on every run: the test counts real runs.
"""

import asyncio
from pathlib import Path
from typing import Any

from threadwarden.bindings import AttemptContext, Binding, Completed, Outcome

AGENT_ID = "slow-tool"
DIGEST = "slow-tool-v1"


async def _charge(args: dict[str, Any]) -> Any:
    ledger = Path(args["ledger"])
    with ledger.open("a") as runs:
        runs.write("ran\n")
    run = len(ledger.read_text().splitlines())
    if run == 1:
        await asyncio.sleep(args["hold_s"])  # the test kills the worker while this waits
    return {"charged": args["cents"], "run": run}


async def _handle(context: AttemptContext) -> Outcome:
    await context.append("message", {"text": "before"})
    result = await context.tool("charge", context.input, _charge, side_effect=True)
    await context.append("message", {"text": "after"})
    return Completed({"charge": result})


def slow_tool_binding() -> Binding:
    """The binding, for in-process workers."""
    return Binding(agent_id=AGENT_ID, digest=DIGEST, handler=_handle)


BINDING = slow_tool_binding()
