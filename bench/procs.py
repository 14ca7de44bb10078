"""Worker processes: N copies of one command on one task queue, each logging to its own files."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bench.measure import wait_until

STOP_DEADLINE_S = 20.0
"""How long a worker may take to shut down after SIGTERM before it is killed."""
READY_DEADLINE_S = 90.0
ROOT = Path(__file__).resolve().parent.parent
"""The checkout ``bench`` belongs to: workers import its packages first (``PYTHONPATH``)."""
TIMEOUT_LINE = re.compile(
    r"^(?![\s\w.]*(Error|Exception)\b|\s|Traceback).*(timed out|timeout)", re.I
)
"""A log record mentioning a timeout (not a traceback's frame or exception line)."""
FAILED_PASS_LINE = "pass failed"


class WorkerDied(RuntimeError):
    """A worker process exited while the bench still needed it."""


@dataclass(frozen=True)
class WorkerCommand:
    """How to start one worker process and how to tell that it is ready."""

    argv: Sequence[str]
    env: dict[str, str]
    ready: re.Pattern[str]
    """Matched against the process's stdout; the worker polls its task queue once it shows."""


@dataclass
class _Process:
    proc: asyncio.subprocess.Process
    stdout: Path
    stderr: Path


class WorkerGroup:
    """Running worker processes; `check` raises `WorkerDied` once any of them has exited."""

    def __init__(self, processes: list[_Process]) -> None:
        self._processes = processes

    @property
    def stderr_files(self) -> list[Path]:
        return [p.stderr for p in self._processes]

    @property
    def pids(self) -> list[int]:
        return [p.proc.pid for p in self._processes]

    def check(self) -> None:
        for p in self._processes:
            if p.proc.returncode is not None:
                tail = p.stderr.read_text(errors="replace").strip().splitlines()[-5:]
                raise WorkerDied(
                    f"worker pid {p.proc.pid} exited with code {p.proc.returncode}"
                    f" (stderr in {p.stderr}): {' | '.join(tail)}"
                )

    async def wait_ready(self, ready: re.Pattern[str]) -> None:
        async def count_ready() -> int:
            self.check()
            return sum(
                bool(ready.search(p.stdout.read_text(errors="replace"))) for p in self._processes
            )

        await wait_until(
            count_ready,
            lambda n: n == len(self._processes),
            timeout_s=READY_DEADLINE_S,
            what="worker processes ready",
        )

    async def stop(self) -> None:
        """SIGTERM each worker, then SIGKILL whichever is still running after the deadline."""
        await stop_processes([p.proc for p in self._processes])


async def stop_processes(processes: Sequence[asyncio.subprocess.Process]) -> None:
    """SIGTERM each running process, then SIGKILL whichever outlives `STOP_DEADLINE_S`."""
    running = [proc for proc in processes if proc.returncode is None]
    for proc in running:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    for proc in running:
        try:
            await asyncio.wait_for(proc.wait(), STOP_DEADLINE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


def log_counts(files: Sequence[Path]) -> tuple[int, int]:
    """Lines mentioning a timeout, and lines reporting a failed pass, in the workers' stderr."""
    timeouts = failed = 0
    for path in files:
        for line in path.read_text(errors="replace").splitlines():
            timeouts += bool(TIMEOUT_LINE.search(line))
            failed += FAILED_PASS_LINE in line
    return timeouts, failed


@contextlib.asynccontextmanager
async def worker_group(
    command: WorkerCommand, count: int, logs: Path
) -> AsyncIterator[WorkerGroup]:
    """Start ``count`` workers (stdout/stderr in ``logs``), wait until ready; stop them on exit."""
    logs.mkdir(parents=True, exist_ok=True)
    processes: list[_Process] = []
    group = WorkerGroup(processes)
    try:
        for n in range(count):
            out, err = logs / f"worker{n}.stdout", logs / f"worker{n}.stderr"
            with _open(out) as stdout, _open(err) as stderr:
                proc = await asyncio.create_subprocess_exec(
                    *command.argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    env=environment(command.env),
                    start_new_session=True,
                )
            processes.append(_Process(proc, out, err))
        await group.wait_ready(command.ready)
        yield group
    finally:
        await group.stop()


def environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment with ``extra``, and the checkout first on ``PYTHONPATH``."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def _open(path: Path) -> IO[bytes]:
    return path.open("wb")
