"""``python -m bench.agent_layers [--threads N] [--turns N] [--repeat N] [--json]``: where an
agent turn's CPU goes below the worker.

The agent shape (``--shape agent``) compares a whole worker with the bare agent. This splits the
difference by layer, each in a fresh process (`bench.agent_bare`, its own CPU only) against the
scripted chat server (in this process, apart), answering at once:

- ``bare``: the bench agent alone, ``agent.run`` with its message history;
- ``adapter``: threadwarden's pydantic-ai binding (`agent_binding`) run by an in-memory attempt
  context (`MemoryContext`): the journaled model and toolsets and the thread's memory rebuilt
  from its records each turn, as in a worker, with no ledger, no pass and no Temporal; live text
  off, so each response is asked whole;
- ``adapter-live``: the same with live text on: each response streamed, its text deltas taken
  (and dropped).

What a worker adds on top of ``adapter-live`` (the pass, the journal's writes, Temporal) is the
agent shape's worker CPU minus this layer's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

from bench.procs import ROOT
from threadwarden.bindings import AttemptContext, Completed, Handler, ThreadRecord

LAYERS = ("bare", "adapter", "adapter-live")


@dataclass
class MemoryContext:
    """The part of `AttemptContext` an agent adapter uses, kept in memory: a tool's run is
    called once (nothing journaled), ``append`` keeps the record, the history is the thread's
    records so far. Each turn settles ``completed`` (a ``settlement`` record), as the turns of a
    worker's thread do."""

    thread_id: str
    submission_id: str
    input: Any
    records: list[ThreadRecord]
    live_text: bool
    history: list[ThreadRecord] = field(init=False)
    budget_left: int | None = None
    deltas: int = 0

    def __post_init__(self) -> None:
        self.history = list(self.records)

    async def tool(
        self,
        name: str,
        args: dict[str, Any],
        run: Callable[[dict[str, Any]], Awaitable[Any]],
        **_: Any,
    ) -> Any:
        return await run(args)

    def text_delta(self, text: str) -> None:
        self.deltas += 1

    async def append(self, kind: str, body: Any) -> ThreadRecord:
        record = ThreadRecord(
            sequence=len(self.records),
            record_id=f"{self.thread_id}-{len(self.records)}",
            submission_id=self.submission_id,
            kind=kind,
            body=json.loads(json.dumps(body)),  # as the ledger gives it back
        )
        self.records.append(record)
        return record


async def adapter_turn(
    handler: Handler,
    thread: int,
    turn: int,
    prompt: str,
    records: list[ThreadRecord],
    *,
    live: bool,
) -> MemoryContext:
    """One turn of the adapter layer: the binding's handler on ``records`` (the thread so far),
    then the turn's settlement."""
    ctx = MemoryContext(f"t{thread}", f"t{thread}-{turn}", prompt, records, live)
    outcome = await handler(cast(AttemptContext, ctx))
    settled = "completed" if isinstance(outcome, Completed) else "failed"
    await ctx.append("settlement", {"outcome": settled})
    return ctx


async def _layer(url: str, layer: str, threads: int, turns: int) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.agent_bare",
        url,
        str(threads),
        str(turns),
        f"--layer={layer}",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"layer {layer}: exit code {process.returncode}")
    figures: dict[str, Any] = json.loads(out)
    return figures


async def measure(threads: int, turns: int, repeat: int) -> dict[str, Any]:
    """Every layer ``repeat`` times, in turn; CPU ms per turn (median) and per layer the ratio
    to ``bare``."""
    from tests.helpers.chat_server import chat_server  # here: a layer's process needs it not

    cpu: dict[str, list[float]] = {layer: [] for layer in LAYERS}
    async with chat_server() as server:
        server.stream_delay_s = 0.0  # a streamed answer's chunks come at once: CPU, not waits
        for _ in range(repeat):
            for layer in LAYERS:
                figures = await _layer(server.url, layer, threads, turns)
                cpu[layer].append(1000 * figures["cpu_s"] / figures["turns"])
    medians = {layer: round(statistics.median(values), 2) for layer, values in cpu.items()}
    return {
        "threads": threads,
        "turns": turns,
        "repeat": repeat,
        "cpu_ms_per_turn": medians,
        "runs": {layer: [round(v, 2) for v in values] for layer, values in cpu.items()},
        "ratio_to_bare": {
            layer: round(medians[layer] / medians["bare"], 3) for layer in LAYERS if medians["bare"]
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agent_layers", description=__doc__)
    parser.add_argument("--threads", type=int, default=4, help="conversations at once (4)")
    parser.add_argument("--turns", type=int, default=25, help="turns per conversation (25)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each layer (3)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    for name in ("threads", "turns", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: expected at least 1")
    data = asyncio.run(measure(args.threads, args.turns, args.repeat))
    if args.json:
        print(json.dumps(data))
        return 0
    print(f"CPU ms per turn ({args.threads}×{args.turns}, median of {args.repeat}):")
    for layer in LAYERS:
        ratio = data["ratio_to_bare"].get(layer)
        print(f"  {layer:13s} {data['cpu_ms_per_turn'][layer]:8.2f}   {ratio}× bare")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
