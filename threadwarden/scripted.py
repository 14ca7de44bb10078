"""The built-in ``scripted`` binding: its input is a list of steps, so demos and tests can drive
every path deterministically.

Steps: ``{"say": text}``, ``{"tool": name, "args": {...}, "side_effect": bool}``,
``{"approval": reason}``, ``{"fail": message}``, ``{"sleep_ms": n}``.
"""

import asyncio
from typing import Any

from threadwarden.bindings import AttemptContext, Binding, Completed, Failed, Outcome
from threadwarden.errors import InvalidInput

SCRIPTED_AGENT_ID = "scripted"
SCRIPTED_DIGEST = "scripted-v1"
_HEARTBEAT_SLICE_S = 1.0


def parse_steps(value: Any) -> list[dict[str, Any]]:
    """Validate a scripted input; raise `InvalidInput` naming the first bad step."""
    if not isinstance(value, list):
        raise InvalidInput("input", "a list of scripted steps", value)
    for index, step in enumerate(value):
        _validate_step(f"input[{index}]", step)
    return value


def _validate_step(field: str, step: Any) -> None:
    if not isinstance(step, dict) or len(step.keys() - {"args", "side_effect"}) != 1:
        raise InvalidInput(field, "an object with one of say, tool, approval, fail, sleep_ms", step)
    if "say" in step or "approval" in step or "fail" in step:
        text = step.get("say", step.get("approval", step.get("fail")))
        if not isinstance(text, str):
            raise InvalidInput(field, "a string value", text)
    elif "tool" in step:
        if not isinstance(step["tool"], str) or not isinstance(step.get("args", {}), dict):
            raise InvalidInput(field, "a tool name and an args object", step)
    elif "sleep_ms" in step:
        delay = step["sleep_ms"]
        if not isinstance(delay, int) or isinstance(delay, bool) or not 0 <= delay <= 600_000:
            raise InvalidInput(f"{field}.sleep_ms", "an integer between 0 and 600000", delay)
    else:
        raise InvalidInput(field, "one of say, tool, approval, fail, sleep_ms", step)


async def _echo_tool(args: dict[str, Any]) -> Any:
    return {"ok": True, "echo": args}


async def run_scripted(context: AttemptContext) -> Outcome:
    """Run the steps in order; the first ``fail`` or ``approval`` ends the submission."""
    said: list[str] = []
    for step in parse_steps(context.input):
        if "say" in step:
            await context.append("message", {"text": step["say"]})
            said.append(step["say"])
        elif "tool" in step:
            await context.tool(
                step["tool"],
                step.get("args", {}),
                _echo_tool,
                side_effect=bool(step.get("side_effect", False)),
            )
        elif "approval" in step:
            await context.request_approval(step["approval"])
        elif "fail" in step:
            return Failed(step["fail"])
        elif not context.replaying:  # a sleep commits nothing; a re-run skips the slept part
            await _sleep_with_heartbeats(context, step["sleep_ms"] / 1000)
    return Completed({"said": said})


async def _sleep_with_heartbeats(context: AttemptContext, seconds: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (left := deadline - loop.time()) > 0:
        await asyncio.sleep(min(left, _HEARTBEAT_SLICE_S))
        context.heartbeat()


def scripted_binding() -> Binding:
    """The reference binding every worker registers by default."""
    return Binding(agent_id=SCRIPTED_AGENT_ID, digest=SCRIPTED_DIGEST, handler=run_scripted)
