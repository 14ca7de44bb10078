"""``python -m bench --soak SECONDS``: threadwarden alone, at a steady rate, for a long while.

1. The maximum: unless ``--rate`` names the rate, one measured threadwarden run of the bench's
   shape (``--hosts`` × ``--submissions``, as the comparison runs it) gives units/s.
2. A fresh database and one worker process. Units are submitted at 60% of that maximum
   (``SOAK_SHARE``), round-robin over ``--hosts`` threads, for SECONDS; the worker's resident
   memory (VmRSS of its process tree) is sampled at the end of every minute.
3. Then every unit must settle (bounded by ``--timeout``). Per minute of submission: units,
   latency p50/p95 (settled_at − submit time), worker RSS; whether each stays within ±15% of
   its median over the minutes (`FLAT`); the ledger's table sizes before and after; activity
   timeouts and failed passes from the worker's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
from temporalio.client import Client

from bench import cpu
from bench.measure import percentile, wait_until
from bench.procs import log_counts, worker_group
from bench.side import Shape, run_side
from bench.stack import BenchStack, bench_stack, connected
from bench.threadwarden_run import ThreadwardenSide

SOAK_SHARE = 0.6
"""The share of the measured maximum the soak holds."""
FLAT = 0.15
"""A per-minute figure is flat when every minute is within this share of the minutes' median."""
IN_FLIGHT = 200
"""Submissions awaiting their admission at once, at most (the pacing never waits on them)."""

_TABLES = """
SELECT relname AS name, n_live_tup AS rows, pg_total_relation_size(relid) AS bytes
  FROM pg_stat_user_tables WHERE schemaname = 'threadwarden' ORDER BY relname
"""


async def soak(seconds: float, *, rate: float | None, shape: Shape, logs: Path) -> dict[str, Any]:
    """The soak's figures (see the module docstring)."""
    side = ThreadwardenSide()
    async with bench_stack() as stack:
        maximum = None
        if rate is None:
            temporal = await Client.connect(stack.temporal_address)
            run = await run_side(stack, side, shape, rep=0, temporal=temporal, logs=logs)
            if run.error is not None:
                raise RuntimeError(f"measuring the maximum failed: {run.error}")
            maximum = run.units_per_s
            rate = SOAK_SHARE * maximum
        figures = await _soak(stack, side, seconds, rate, shape, logs)
    return {"shape": "soak", "seconds": seconds, "maximum_units_per_s": maximum, **figures}


async def _soak(
    stack: BenchStack,
    side: ThreadwardenSide,
    seconds: float,
    rate: float,
    shape: Shape,
    logs: Path,
) -> dict[str, Any]:
    tag = f"soak-{uuid.uuid4().hex[:6]}"
    database = tag.replace("-", "_")
    dsn = await stack.fresh_database(database)
    await side.prepare(dsn)
    task_queue = f"bench-{tag}"
    command = side.worker_command(dsn, stack.temporal_address, task_queue, stack.scratch / tag)
    threads = [f"{tag}-h{n}" for n in range(shape.hosts)]
    issued: dict[str, float] = {}
    rss: list[float] = []
    async with (
        worker_group(command, 1, logs / tag) as group,
        side.driver(dsn, stack.temporal_address, task_queue, 0) as driver,
        connected(dsn) as conn,
    ):
        before = await _table_sizes(conn)
        limit = asyncio.Semaphore(IN_FLIGHT)
        pending: set[asyncio.Task[None]] = set()

        async def submit(thread: str, seq: int) -> None:
            async with limit:
                at = time.time()
                issued[await driver.submit(thread, seq)] = at

        loop = asyncio.get_running_loop()
        start = loop.time()
        minute_end = start + 60
        for n in range(int(seconds * rate)):
            due = start + n / rate
            while due >= minute_end:  # a minute ended before this unit: sample memory
                await asyncio.sleep(max(minute_end - loop.time(), 0))
                rss.append(_rss_mib(group.pids))
                minute_end += 60
            await asyncio.sleep(max(due - loop.time(), 0))
            group.check()
            task = asyncio.create_task(submit(threads[n % len(threads)], n))
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)
        await asyncio.sleep(max(minute_end - loop.time(), 0))
        rss.append(_rss_mib(group.pids))
        units = len(issued)
        settled = await wait_until(
            lambda: conn.fetchval(side.count_sql, threads),
            lambda count: count >= units,
            timeout_s=shape.timeout_s,
            what="every soak unit settled",
        )
        rows = await conn.fetch(side.completions_sql, threads)
        after = await _table_sizes(conn)
    timeouts, failed = log_counts(group.stderr_files)
    minutes = _per_minute(rows, issued, start_wall=min(issued.values()), rss=rss)
    return {
        "rate_units_per_s": round(rate, 2),
        "hosts": shape.hosts,
        "units": units,
        "settled": int(settled),
        "completed": sum(1 for r in rows if r["ok"]),
        "minutes": minutes,
        "flat": {
            key: _flat([m[key] for m in minutes if m[key] is not None])
            for key in ("p50_ms", "p95_ms", "worker_rss_mib")
        },
        "tables_before": before,
        "tables_after": after,
        "worker_log_timeout_lines": timeouts,
        "failed_passes": failed,
    }


def _per_minute(
    rows: list[asyncpg.Record], issued: dict[str, float], *, start_wall: float, rss: list[float]
) -> list[dict[str, Any]]:
    """Per minute of submission: units, latency p50/p95 and the RSS sampled at its end."""
    latencies: dict[int, list[float]] = {}
    for r in rows:
        at = issued.get(r["key"])
        if at is not None:
            minute = int((at - start_wall) // 60)
            latencies.setdefault(minute, []).append((r["done_at"].timestamp() - at) * 1000)
    return [
        {
            "minute": minute + 1,
            "units": len(latencies.get(minute, [])),
            "p50_ms": _round(percentile(latencies.get(minute, []), 50)),
            "p95_ms": _round(percentile(latencies.get(minute, []), 95)),
            "worker_rss_mib": round(rss[minute], 1) if minute < len(rss) else None,
        }
        for minute in range(max(len(rss), max(latencies, default=-1) + 1))
    ]


def _flat(values: list[float]) -> dict[str, Any]:
    """The median over the minutes and the largest deviation from it, as a share."""
    if not values:
        return {"median": None, "max_deviation": None, "within": None}
    median = statistics.median(values)
    deviation = max(abs(v - median) for v in values) / median if median else 0.0
    return {
        "median": round(median, 1),
        "max_deviation": round(deviation, 3),
        "within": deviation <= FLAT,
    }


def _rss_mib(pids: list[int]) -> float:
    """Resident memory of the worker processes and their children, MiB."""
    total_kib = 0
    for pid in cpu.trees(pids):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
    return total_kib / 1024


async def _table_sizes(conn: asyncpg.Connection[Any]) -> dict[str, dict[str, int]]:
    await conn.execute("ANALYZE")  # fresh row estimates
    return {
        r["name"]: {"rows": int(r["rows"]), "bytes": int(r["bytes"])}
        for r in await conn.fetch(_TABLES)
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
