"""``--streams N``: a console process serving N event streams beside threadwarden's measured run.

For the measured phase of each threadwarden repetition (not the warm-up):

1. ``threadwarden console`` starts as a process of its own on the side's database, as the role
   `bench.stack.CONSOLE` (its statements are counted apart from the side's), on
   ``127.0.0.1:0``, with a fresh application token (``THREADWARDEN_API_TOKEN``); the bench
   waits for its ``console http://…`` line and reads its resident memory (idle).
2. ``python -m bench.sse`` (another process) opens N ``GET /v1/threads/{thread}/events``
   streams with that token, round-robin over the measured hosts' threads (which do not exist
   yet: a stream waits for its thread), and reports them open; the console's memory is read
   again (open). Then the measured clock starts.
3. After the run (the hosts' workflows closed, CPU read), the bench tells the stream process
   each thread's last record sequence and waits until every stream has seen it; the stream
   process reports what it received. The console's RSS is read (end; ``VmHWM``: peak), then
   the stream process and the console stop, before the workers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from bench import sse
from bench.procs import (
    READY_DEADLINE_S,
    WorkerCommand,
    WorkerDied,
    WorkerGroup,
    environment,
    stop_processes,
    worker_group,
)

CONSOLE_READY = re.compile(r"^console (http://\S+)", re.MULTILINE)
"""What ``threadwarden console`` prints once it serves."""
OPEN_LINE = re.compile(r"^streams open (\d+)/(\d+)$")
RESULT_DEADLINE_S = sse.CATCH_UP_S + 30.0
"""How long the stream process may take to report once told the last sequences."""
_LAST_SEQUENCES = """
SELECT thread_id, max(sequence) AS last
  FROM threadwarden.records WHERE thread_id = ANY($1::text[]) GROUP BY thread_id
"""


def memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak resident) of one process, KiB (empty once it is gone)."""
    found: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                found[name] = int(value.split()[0])
    return found


def _mib(kib: int | None) -> float | None:
    return None if kib is None else round(kib / 1024, 1)


@dataclass
class StreamWatch:
    """The console and the stream process while the measured run goes on."""

    console: WorkerGroup
    client: asyncio.subprocess.Process
    requested: int
    opened: int
    rss_idle_kib: int | None
    rss_open_kib: int | None
    first_deltas: list[tuple[str, float]] = field(default_factory=list)
    """Once `finish`ed: ``(submission, time)`` of each stream's first live-text event of each
    submission (``time.time()`` at the stream process)."""

    @property
    def pids(self) -> dict[str, list[int]]:
        """CPU groups (`bench.cpu`), reported apart from the measured processes'."""
        return {"console": self.console.pids, "streams": [self.client.pid]}

    async def finish(
        self, observer: asyncpg.Connection[Any], threads: Sequence[str]
    ) -> dict[str, Any]:
        """Once the run is over: wait until every stream saw its thread's last record, then
        what they received and the console's memory (``streams`` of `bench.measure.SideRun`)."""
        rows = await observer.fetch(_LAST_SEQUENCES, list(threads))
        expected = {r["thread_id"]: int(r["last"]) for r in rows}
        received: dict[str, Any] = {}
        try:
            assert self.client.stdin is not None and self.client.stdout is not None
            self.client.stdin.write((json.dumps(expected) + "\n").encode())
            await self.client.stdin.drain()
            line = await asyncio.wait_for(self.client.stdout.readline(), RESULT_DEADLINE_S)
            received = json.loads(line) if line.strip() else {}
        except (OSError, TimeoutError, ValueError) as error:
            received = {"errors": [f"stream process: {type(error).__name__}: {error}"]}
        try:
            self.console.check()  # it must have served the whole run
        except WorkerDied as error:
            received.setdefault("errors", []).append(f"console: {error}")
        self.first_deltas = [(str(sub), float(at)) for sub, at in received.get("first_deltas", [])]
        memory = memory_kib(self.console.pids[0])
        return {
            "requested": self.requested,
            "opened": int(received.get("opened", self.opened)),
            "events_received": received.get("events_received"),
            "events_expected": received.get("events_expected"),
            "caught_up": received.get("caught_up", 0),
            "out_of_order": received.get("out_of_order"),
            "ended_by_server": received.get("ended_by_server"),
            "failed": received.get("failed"),
            "catch_up_s": received.get("catch_up_s"),
            "deltas_received": received.get("deltas_received"),
            "restarted_steps": received.get("restarted_steps"),
            "console_rss_idle_mib": _mib(self.rss_idle_kib),
            "console_rss_open_mib": _mib(self.rss_open_kib),
            "console_rss_peak_mib": _mib(memory.get("VmHWM")),
            "console_rss_end_mib": _mib(memory.get("VmRSS")),
            "errors": list(received.get("errors", [])),
        }


def console_command(
    argv: Sequence[str], dsn: str, temporal_address: str, data_dir: Path
) -> tuple[WorkerCommand, str]:
    """``threadwarden console`` on any free loopback port, and the application token it takes."""
    token = secrets.token_urlsafe(24)
    env = {
        "THREADWARDEN_DATABASE_URL": dsn,
        "THREADWARDEN_TEMPORAL_ADDRESS": temporal_address,
        "THREADWARDEN_CONSOLE_ADDRESS": "127.0.0.1:0",
        "THREADWARDEN_API_TOKEN": token,
        "THREADWARDEN_DATA_DIR": str(data_dir),
    }
    return WorkerCommand([*argv, "console"], env, CONSOLE_READY), token


@contextlib.asynccontextmanager
async def console_streams(
    command: WorkerCommand, token: str, threads: Sequence[str], count: int, logs: Path
) -> AsyncIterator[StreamWatch]:
    """The console (``command``) with ``count`` streams open on ``threads``; both stop on exit."""
    async with worker_group(command, 1, logs / "console") as console:
        stdout = (logs / "console" / "worker0.stdout").read_text(errors="replace")
        found = CONSOLE_READY.search(stdout)
        assert found is not None  # worker_group waited for it
        idle = memory_kib(console.pids[0]).get("VmRSS")
        with (logs / "streams.stderr").open("wb") as stderr:
            client = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bench.sse",
                found.group(1),
                str(count),
                *threads,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                env=environment({sse.TOKEN_ENV: token}),
                start_new_session=True,
            )
        try:
            assert client.stdout is not None
            line = await asyncio.wait_for(
                client.stdout.readline(), READY_DEADLINE_S + sse.OPEN_DEADLINE_S
            )
            opened = OPEN_LINE.match(line.decode().strip())
            if opened is None:
                tail = (logs / "streams.stderr").read_text(errors="replace")[-500:]
                raise RuntimeError(f"stream process: no open line ({line!r}): {tail}")
            console.check()
            yield StreamWatch(
                console,
                client,
                requested=count,
                opened=int(opened.group(1)),
                rss_idle_kib=idle,
                rss_open_kib=memory_kib(console.pids[0]).get("VmRSS"),
            )
        finally:
            if client.stdin is not None:
                client.stdin.close()
            await stop_processes([client])
