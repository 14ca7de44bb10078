"""The built-in ``scripted`` binding: its input is a list of steps, so demos and tests can drive
every path deterministically.

Steps: ``{"say": text}``, ``{"tool": name, "args": {...}, "side_effect": bool}``,
``{"approval": reason}``, ``{"ask": payload, "schema": {...}}`` (ask a person, wait for the
answer; ``schema`` optional), ``{"fail": message}``, ``{"sleep_ms": n}``,
``{"send": {"thread": id, "input": value, "agent": id, "host": id}}`` (a message to another
thread; ``agent`` defaults to ``scripted``, ``host`` to the destination's own),
``{"call": {"thread": id, "agent": id, "input": value, "host": id, "budget": n}}`` (delegate to
a subagent and wait for its outcome; ``agent`` defaults to ``scripted``, ``thread`` to the one
``call_agent`` derives, ``host`` and ``budget`` are optional), ``{"calls": [call, ...]}``
(several delegations awaited together), ``{"spend": n}`` (spend n units of the budget a
delegation gave this submission) and ``{"stream": text, "chunk_ms": n}`` (a model-like step: the
text goes to readers word by word as live text, one word every ``n`` ms, default 100, then its
whole is journaled as the step's result and said as a message). A scripted child's input is
validated as scripted steps too. The binding is inline; its ``sleep_ms`` and ``stream`` steps
declare their length, so an inline attempt never starts one it would not finish within its
budget: it yields before it and the dispatched attempt runs it, once.

The outcome is ``Completed({"said": [...]})``; a script that asked also gets ``"answers":
[...]`` (in order), and one that made calls
``"children": [{"thread", "submission_id", "outcome", "result"}, ...]``, one per call in script
order (a failed or aborted child is listed with that outcome, the script goes on; a call with a
budget also lists ``budget_consumed``).
"""

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

from threadwarden.bindings import (
    AttemptContext,
    Binding,
    ChildOutcome,
    Completed,
    Failed,
    Outcome,
)
from threadwarden.errors import InvalidInput
from threadwarden.validation import check_schema, validate_id, validate_input

SCRIPTED_AGENT_ID = "scripted"
SCRIPTED_DIGEST = "scripted-v1"
STEP_KINDS = "say, tool, approval, ask, fail, sleep_ms, send, call, calls, spend, stream"
_HEARTBEAT_SLICE_S = 1.0
STREAM_CHUNK_MS = 100
"""A ``stream`` step's default pause between words."""


def parse_steps(value: Any) -> list[dict[str, Any]]:
    """Validate a scripted input; raise `InvalidInput` naming the first bad step."""
    if not isinstance(value, list):
        raise InvalidInput("input", "a list of scripted steps", value)
    for index, step in enumerate(value):
        _validate_step(f"input[{index}]", step)
    return value


def _validate_step(field: str, step: Any) -> None:
    extras = {"args", "side_effect", "schema", "chunk_ms"}
    if not isinstance(step, dict) or len(step.keys() - extras) != 1:
        raise InvalidInput(field, f"an object with one of {STEP_KINDS}", step)
    if "chunk_ms" in step and "stream" not in step:
        raise InvalidInput(f"{field}.chunk_ms", "chunk_ms only beside stream", step)
    if "schema" in step and "ask" not in step:
        raise InvalidInput(f"{field}.schema", "a schema only beside ask", step)
    nested = next((key for key in _NESTED if key in step), None)
    if "stream" in step:
        if not isinstance(step["stream"], str):
            raise InvalidInput(f"{field}.stream", "a string", step["stream"])
        _validate_sleep(f"{field}.chunk_ms", step.get("chunk_ms", STREAM_CHUNK_MS))
    elif "say" in step or "approval" in step or "fail" in step:
        text = step.get("say", step.get("approval", step.get("fail")))
        if not isinstance(text, str):
            raise InvalidInput(field, "a string value", text)
    elif "ask" in step:
        _validate_ask(field, step)
    elif "tool" in step:
        if not isinstance(step["tool"], str) or not isinstance(step.get("args", {}), dict):
            raise InvalidInput(field, "a tool name and an args object", step)
    elif nested is not None:
        _NESTED[nested](f"{field}.{nested}", step[nested])
    else:
        raise InvalidInput(field, f"one of {STEP_KINDS}", step)


def _validate_sleep(field: str, delay: Any) -> None:
    if not isinstance(delay, int) or isinstance(delay, bool) or not 0 <= delay <= 600_000:
        raise InvalidInput(field, "an integer between 0 and 600000", delay)


def _validate_ask(field: str, step: dict[str, Any]) -> None:
    validate_input(f"{field}.ask", step["ask"])
    if step.get("schema") is not None:
        try:
            check_schema(step["schema"])
        except InvalidInput as error:
            raise InvalidInput(f"{field}.schema", error.expected) from error


def _validate_send(field: str, send: Any) -> None:
    if not isinstance(send, dict) or "thread" not in send or "input" not in send:
        raise InvalidInput(field, "an object with thread and input (agent, host optional)", send)
    if send.keys() - {"thread", "input", "agent", "host"}:
        raise InvalidInput(field, "only the keys thread, input, agent, host", sorted(send))
    validate_id(f"{field}.thread", send["thread"])
    validate_id(f"{field}.agent", send.get("agent", SCRIPTED_AGENT_ID))
    if send.get("host") is not None:
        validate_id(f"{field}.host", send["host"])


def _validate_calls(field: str, calls: Any) -> None:
    if not isinstance(calls, list) or not calls:
        raise InvalidInput(field, "a non-empty list of call objects", calls)
    for index, call in enumerate(calls):
        _validate_call(f"{field}[{index}]", call)


def _validate_call(field: str, call: Any) -> None:
    if not isinstance(call, dict) or "input" not in call:
        raise InvalidInput(field, "an object with input (thread, agent, host optional)", call)
    if call.keys() - {"thread", "input", "agent", "host", "budget"}:
        raise InvalidInput(field, "only the keys thread, input, agent, host, budget", sorted(call))
    if call.get("budget") is not None:
        _validate_units(f"{field}.budget", call["budget"])
    if call.get("thread") is not None:
        validate_id(f"{field}.thread", call["thread"])
    agent = validate_id(f"{field}.agent", call.get("agent", SCRIPTED_AGENT_ID))
    if call.get("host") is not None:
        validate_id(f"{field}.host", call["host"])
    if agent == SCRIPTED_AGENT_ID:  # a scripted child's steps are refused now, not at its run
        child = call["input"]
        if not isinstance(child, list):
            raise InvalidInput(f"{field}.input", "a list of scripted steps", child)
        for index, step in enumerate(child):
            _validate_step(f"{field}.input[{index}]", step)


def _validate_units(field: str, units: Any) -> None:
    if not isinstance(units, int) or isinstance(units, bool) or units < 0:
        raise InvalidInput(field, "a non-negative integer", units)


_NESTED: dict[str, Callable[[str, Any], None]] = {
    "send": _validate_send,
    "call": _validate_call,
    "calls": _validate_calls,
    "spend": _validate_units,
    "sleep_ms": _validate_sleep,
}
"""Step kinds whose value is checked by a validator of its own (named ``input[i].<kind>``)."""


async def _echo_tool(args: dict[str, Any]) -> Any:
    return {"ok": True, "echo": args}


async def run_scripted(context: AttemptContext) -> Outcome:
    """Run the steps in order; the first ``fail`` or ``approval`` ends the submission."""
    said: list[str] = []
    answers: list[Any] = []
    children: list[dict[str, Any]] = []
    for step in parse_steps(context.input):
        if "fail" in step:
            return Failed(step["fail"])
        if "say" in step:
            await context.append("message", {"text": step["say"]})
            said.append(step["say"])
        elif "stream" in step:
            text = await _stream(context, step["stream"], step.get("chunk_ms", STREAM_CHUNK_MS))
            await context.append("message", {"text": text})
            said.append(text)
        elif "ask" in step:
            answers.append(await context.ask(step["ask"], schema=step.get("schema")))
        elif "call" in step:
            children.append(_child(await _call(context, step["call"])))
        elif "calls" in step:
            outcomes = await asyncio.gather(*(_call(context, call) for call in step["calls"]))
            children.extend(_child(outcome) for outcome in outcomes)
        else:
            await _act(context, step)
    result: dict[str, Any] = {"said": said}
    if answers:
        result["answers"] = answers
    if children:
        result["children"] = children
    return Completed(result)


async def _stream(context: AttemptContext, text: str, chunk_ms: int) -> str:
    """A model-like step: ``text`` word by word as live text, then journaled whole (a re-run
    after the journal returns the recorded text and streams nothing)."""

    pieces = re.split(r"(?<=\s)(?=\S)", text)

    async def generate(_: dict[str, Any]) -> str:
        for n, piece in enumerate(pieces):
            if n:
                await asyncio.sleep(chunk_ms / 1000)
                context.heartbeat()
            context.text_delta(piece)
        return text

    # Its length is known: an inline attempt it would outlive yields before it starts.
    expected_ms = (len(pieces) - 1) * chunk_ms
    recorded = await context.tool("stream", {"chars": len(text)}, generate, expected_ms=expected_ms)
    return str(recorded)


async def _act(context: AttemptContext, step: dict[str, Any]) -> None:
    """A step whose outcome the result does not list: tool, approval, send, spend, sleep."""
    if "tool" in step:
        await context.tool(
            step["tool"],
            step.get("args", {}),
            _echo_tool,
            side_effect=bool(step.get("side_effect", False)),
        )
    elif "approval" in step:
        await context.request_approval(step["approval"])
    elif "send" in step:
        send = step["send"]
        await context.send_message(
            send["thread"],
            send["input"],
            agent_id=send.get("agent", SCRIPTED_AGENT_ID),
            host_id=send.get("host"),
        )
    elif "spend" in step:
        await context.spend(step["spend"])
    elif not context.replaying:  # a sleep commits nothing; a re-run skips the slept part
        context.before_long_step(step["sleep_ms"])  # never started by an attempt it outlives
        await _sleep_with_heartbeats(context, step["sleep_ms"] / 1000)


def _call(context: AttemptContext, call: dict[str, Any]) -> Awaitable[ChildOutcome]:
    """One delegation; it suspends the attempt (a `BaseException` this binding never catches)
    until the child settled, then a re-run gets the child's recorded outcome."""
    return context.call_agent(
        call.get("agent", SCRIPTED_AGENT_ID),
        call["input"],
        thread_id=call.get("thread"),
        host_id=call.get("host"),
        budget=call.get("budget"),
    )


def _child(outcome: ChildOutcome) -> dict[str, Any]:
    child = {
        "thread": outcome.thread_id,
        "submission_id": outcome.submission_id,
        "outcome": outcome.outcome,
        "result": outcome.result,
    }
    if outcome.budget_consumed is not None:  # the call reserved a budget
        child["budget_consumed"] = outcome.budget_consumed
    return child


async def _sleep_with_heartbeats(context: AttemptContext, seconds: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (left := deadline - loop.time()) > 0:
        await asyncio.sleep(min(left, _HEARTBEAT_SLICE_S))
        context.heartbeat()


def scripted_binding() -> Binding:
    """The reference binding every worker registers by default."""
    return Binding(
        agent_id=SCRIPTED_AGENT_ID,
        digest=SCRIPTED_DIGEST,
        handler=run_scripted,
        history_kinds=frozenset(),  # its steps never read the thread's history
        inline=True,
    )
