"""``python -m bench.agent_bare URL THREADS TURNS [--stream] [--layer=LAYER]``: the bare agent,
the agent shape's reference.

THREADS conversations run concurrently, each TURNS turns in order with its message history
carried (`agent.run`, no threadwarden); prints one JSON object: ``seconds`` (first turn to
last), ``cpu_s`` (this process, the measured loop only), ``turns`` and ``turn_ms`` (per turn,
``agent.run``'s duration). With ``--stream`` each
model request is streamed (an ``event_stream_handler``) and ``first_chunk_ms`` lists, per turn,
the time from the turn's start to the first chunk of its answer's text. ``--layer=adapter`` (or
``adapter-live``) runs each turn through threadwarden's pydantic-ai binding instead, with an
in-memory attempt context (`bench.agent_layers`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterable
from typing import Any

from bench.agent_layers import adapter_turn
from bench.agent_support import WARM_UP, first_text, support_agent, unit_prompt
from threadwarden.agents.pydantic_ai import agent_binding
from threadwarden.bindings import Handler, ThreadRecord


async def _conversation(
    agent: Any, thread: int, turns: int, turn_ms: list[float], first_chunks: list[float] | None
) -> None:
    history: list[Any] = []
    seen: list[float] = []  # the current turn's first chunk, once it came

    async def on_events(_: Any, events: AsyncIterable[Any]) -> None:
        async for event in events:
            if not seen and first_text(event):
                seen.append(time.perf_counter())

    streamed = {} if first_chunks is None else {"event_stream_handler": on_events}
    for turn in range(turns):
        seen.clear()
        started = time.perf_counter()
        result = await agent.run(unit_prompt(thread, turn), message_history=history, **streamed)
        turn_ms.append(1000 * (time.perf_counter() - started))
        history = result.all_messages()
        if first_chunks is not None and seen:
            first_chunks.append(1000 * (seen[0] - started))


async def _through_adapter(
    handler: Handler, thread: int, turns: int, turn_ms: list[float], *, live: bool
) -> None:
    records: list[ThreadRecord] = []
    for turn in range(turns):
        started = time.perf_counter()
        await adapter_turn(handler, thread, turn, unit_prompt(thread, turn), records, live=live)
        turn_ms.append(1000 * (time.perf_counter() - started))


async def main(
    url: str, threads: int, turns: int, *, stream: bool = False, layer: str = "bare"
) -> dict[str, Any]:
    agent = support_agent(url)
    await agent.run(WARM_UP)  # warm-up: imports, connections
    first_chunks: list[float] | None = [] if stream else None
    turn_ms: list[float] = []
    live = layer == "adapter-live"
    handler: Handler | None = None
    if layer != "bare":  # the bare agent builds no binding
        handler = agent_binding(agent, idempotent_tools=["lookup"]).handler
        await _through_adapter(handler, -1, 1, [], live=live)  # its warm-up
    cpu, start = time.process_time(), time.perf_counter()
    await asyncio.gather(
        *(
            _conversation(agent, t, turns, turn_ms, first_chunks)
            if handler is None
            else _through_adapter(handler, t, turns, turn_ms, live=live)
            for t in range(threads)
        )
    )
    figures: dict[str, Any] = {
        "seconds": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu,
        "turns": threads * turns,
        "turn_ms": [round(ms, 2) for ms in turn_ms],
    }
    if first_chunks is not None:
        figures["first_chunk_ms"] = [round(ms, 2) for ms in first_chunks]
    return figures


if __name__ == "__main__":
    url, threads, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    stream = "--stream" in sys.argv[4:]
    layers = [a.split("=", 1)[1] for a in sys.argv[4:] if a.startswith("--layer=")]
    layer = layers[-1] if layers else "bare"
    print(json.dumps(asyncio.run(main(url, threads, turns, stream=stream, layer=layer))))
