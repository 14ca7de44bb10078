"""``python -m bench``: threadwarden against a bare-Temporal baseline, each worker in its own
process, on one embedded stack; repeated, alternating which side goes first; medians reported.
``--shape agent``: a pydantic-ai agent's turns under threadwarden against the same agent run
bare (bench/agent_sides.py). ``--shape long-thread``: one thread of ``--turns`` turns under
threadwarden with a memory budget, bare, and on LangGraph's PostgresSaver (bench/long_sides.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from temporalio.client import Client

from bench import agent_report, report
from bench.baseline import BaselineSide
from bench.measure import SideRun
from bench.side import Shape, Side, run_side
from bench.stack import BenchStack, bench_stack
from bench.threadwarden_run import ThreadwardenSide

SHAPES = ("scripted", "agent", "long-thread")
LONG_THREAD_TURNS = 1000


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    return 0 if text.strip() == "0" else _positive_int(text)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    add = parser.add_argument
    add(
        "--shape",
        choices=SHAPES,
        default="scripted",
        help="scripted: the scripted agent against bare Temporal (default);"
        " agent: a pydantic-ai agent's turns against the same agent run bare;"
        " long-thread: one thread's turns, by decile, under threadwarden, bare and LangGraph",
    )
    add(
        "--turns",
        type=_positive_int,
        metavar="N",
        help=f"long-thread: turns of the thread (default {LONG_THREAD_TURNS}, at least 10)",
    )
    for flag, default, what in (
        ("--hosts", 4, "hosts, or agent threads"),
        ("--submissions", 25, "units per host, or turns per agent thread"),
        ("--workers", 1, "worker processes per side"),
        ("--repeat", 3, "repetitions, medians reported"),
    ):
        add(flag, type=_positive_int, default=default, help=f"{what} (default {default})")
    add(
        "--timeout",
        type=_positive_float,
        default=300.0,
        help="deadline per side run, s (300); long-thread: per turn",
    )
    add("--json", action="store_true", help="print one JSON object")
    add(
        "--top",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="also show each side's N most called SQL",
    )
    add("--logs", type=Path, help="keep worker stdout/stderr here (default: a temp dir)")
    add(
        "--streams",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="during threadwarden's measured runs, a console process serving N event streams"
        " on the measured threads (bench/streams.py): their record events, the console's RSS",
    )
    add(
        "--stream",
        action="store_true",
        help="agent shape: the model streams its answer (20 ms a chunk); a console serves an"
        " event stream per thread and the time to first delta at that reader is reported"
        " against the bare agent's time to its first streamed chunk",
    )
    add(
        "--readers",
        type=_non_negative_int,
        metavar="N",
        help="with --stream: event-stream readers per thread (default 1; 0: the model streams,"
        " nobody reads)",
    )
    add(
        "--soak",
        type=_positive_float,
        metavar="SECONDS",
        help="threadwarden alone at 60%% of its measured maximum (one run of the shape) for"
        " SECONDS: latency and worker RSS per minute, the ledger's table sizes (bench/soak.py)",
    )
    add(
        "--rate",
        type=_positive_float,
        metavar="UNITS_PER_S",
        help="with --soak: hold this rate instead of 60%% of a measured maximum",
    )
    args = parser.parse_args(argv)
    if args.rate is not None and args.soak is None:
        parser.error("--rate: expected together with --soak")
    if args.streams and (args.soak is not None or args.shape != "scripted"):
        parser.error("--streams: only with the scripted shape's comparison (not --soak or --shape)")
    if args.stream and (args.soak is not None or args.shape != "agent"):
        parser.error("--stream: only with --shape agent (not --soak)")
    if args.readers is not None and not args.stream:
        parser.error("--readers: expected together with --stream")
    if args.turns is not None and args.shape != "long-thread":
        parser.error("--turns: only with --shape long-thread")
    if args.shape == "long-thread":
        if args.soak is not None:
            parser.error("--soak: not with --shape long-thread")
        args.turns = LONG_THREAD_TURNS if args.turns is None else args.turns
        if args.turns < 10:
            parser.error(f"--turns: at least 10 (one per decile), got {args.turns}")
    if args.readers is None:
        args.readers = 1 if args.stream else 0
    return args


async def bench(
    shape: Shape, repeat: int, logs: Path, *, streams: int = 0
) -> dict[str, list[SideRun]]:
    """Every repetition of both sides; even repetitions start with the baseline."""
    sides: list[Side] = [BaselineSide(), ThreadwardenSide(streams=streams)]
    runs: dict[str, list[SideRun]] = {side.name: [] for side in sides}
    async with bench_stack() as stack:
        temporal = await Client.connect(stack.temporal_address)
        for rep in range(repeat):
            for side in sides if rep % 2 == 0 else sides[::-1]:
                runs[side.name].append(await _one(stack, side, shape, rep, temporal, logs))
    return runs


async def _one(
    stack: BenchStack, side: Side, shape: Shape, rep: int, temporal: Client, logs: Path
) -> SideRun:
    try:
        return await run_side(stack, side, shape, rep=rep, temporal=temporal, logs=logs)
    except Exception as error:  # a side that cannot run at all is reported, not a traceback
        run = SideRun(side.name, shape.hosts * shape.submissions)
        run.error = f"{type(error).__name__}: {error}"
        print(f"bench: {side.name} repetition {rep}: {run.error}", file=sys.stderr)
        return run


@contextlib.contextmanager
def _log_dir(chosen: Path | None) -> Iterator[Path]:
    if chosen is not None:
        chosen.mkdir(parents=True, exist_ok=True)
        yield chosen.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="threadwarden-bench-logs-") as tmp:
        yield Path(tmp)


Outcome = tuple[dict[str, Any], str, bool]
"""The figures (the JSON object), their readable text, and whether every unit completed."""


def _scripted(args: argparse.Namespace, shape: Shape, logs: Path) -> Outcome:
    """The scripted shape's comparison with the baseline."""
    runs = asyncio.run(bench(shape, args.repeat, logs, streams=args.streams))
    data = report.result(runs, shape, streams=args.streams)
    return data, report.table(data), report.complete(data)


def _agent_shape(args: argparse.Namespace, shape: Shape, logs: Path) -> Outcome:
    """The agent shape's comparison (pydantic-ai imported only here)."""
    from bench.agent_sides import bench_agents

    runs = asyncio.run(
        bench_agents(shape, args.repeat, logs, stream=args.stream, readers=args.readers)
    )
    data = agent_report.result(runs, shape, stream=args.stream, readers=args.readers)
    return data, agent_report.table(data), agent_report.complete(data)


def _long_thread(args: argparse.Namespace, logs: Path) -> Outcome:
    """The long-thread shape's three sides (LangGraph imported only here)."""
    from bench import long_report
    from bench.long_sides import LongShape, bench_long_thread

    shape = LongShape(args.turns, args.timeout)
    data = long_report.result(asyncio.run(bench_long_thread(shape, logs)), shape)
    return data, long_report.table(data), long_report.complete(data)


def _soak(args: argparse.Namespace, shape: Shape, logs: Path) -> Outcome:
    """The soak's figures and a readable summary."""
    from bench.soak import soak

    data = asyncio.run(soak(args.soak, rate=args.rate, shape=shape, logs=logs))
    lines = [
        f"soak {data['seconds']:g} s at {data['rate_units_per_s']} units/s"
        f" (maximum {data['maximum_units_per_s']}), {data['hosts']} threads:"
        f" {data['completed']}/{data['units']} completed",
        "minute  units  p50 ms  p95 ms  worker RSS MiB",
        *(
            f"{m['minute']:>6} {m['units']:>6} {report.cell(m['p50_ms']):>7}"
            f" {report.cell(m['p95_ms']):>7} {report.cell(m['worker_rss_mib']):>15}"
            for m in data["minutes"]
        ),
        f"flat (±15% of the median): {data['flat']}",
        f"tables before: {data['tables_before']}",
        f"tables after: {data['tables_after']}",
        f"timeout lines {data['worker_log_timeout_lines']}, failed passes {data['failed_passes']}",
    ]
    return data, "\n".join(lines), data["completed"] == data["units"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    shape = Shape(args.hosts, args.submissions, args.workers, args.timeout, args.top)
    with _log_dir(args.logs) as logs:
        if args.soak is not None:
            data, text, complete = _soak(args, shape, logs)
        elif args.shape == "long-thread":
            data, text, complete = _long_thread(args, logs)
        elif args.shape == "agent":
            data, text, complete = _agent_shape(args, shape, logs)
        else:
            data, text, complete = _scripted(args, shape, logs)
    print(json.dumps(data) if args.json else text)
    return 0 if complete else 1
