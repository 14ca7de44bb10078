"""``python -m bench.agent_bare URL THREADS TURNS``: the bare agent, the agent shape's reference.

THREADS conversations run concurrently, each TURNS turns in order with its message history
carried (`agent.run`, no threadwarden); prints one JSON object: ``seconds`` (first turn to
last), ``cpu_s`` (this process, the measured loop only) and ``turns``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from bench.agent_support import WARM_UP, support_agent, unit_prompt


async def _conversation(agent: Any, thread: int, turns: int) -> None:
    history: list[Any] = []
    for turn in range(turns):
        result = await agent.run(unit_prompt(thread, turn), message_history=history)
        history = result.all_messages()


async def main(url: str, threads: int, turns: int) -> dict[str, float]:
    agent = support_agent(url)
    await agent.run(WARM_UP)  # warm-up: imports, connections
    cpu, start = time.process_time(), time.perf_counter()
    await asyncio.gather(*(_conversation(agent, t, turns) for t in range(threads)))
    return {
        "seconds": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu,
        "turns": threads * turns,
    }


if __name__ == "__main__":
    url, threads, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(asyncio.run(main(url, threads, turns))))
