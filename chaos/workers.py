"""``threadwarden worker`` processes that the chaos run kills (SIGKILL) or deploys (SIGTERM,
then a new one) and starts again.

A worker told to stop by SIGTERM (a deploy, or the final stop of the run) must exit within
`EXIT_DEADLINE_S`; how long each took is kept (`deploy_exits`, `stop_exits`), and one still
there at the deadline is SIGKILLed (a deploy's is counted in `failed_deploys`).

Each worker slot keeps its logs across incarnations (appended, one file pair per slot) and gets
its own failpoint seed per incarnation, so a restarted worker does not replay its predecessor's
faults. A worker that exits on its own is started again too, and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.measure import wait_until
from bench.procs import ROOT, WorkerCommand
from bench.threadwarden_run import READY

READY_DEADLINE_S = 120.0
"""How long a (re)started worker may take to poll its task queue (2 busy cores: generous)."""
START_TRIES = 3
EXIT_DEADLINE_S = 90.0
"""How long a worker may take to exit after SIGTERM before it is SIGKILLed (and the run fails)."""


class WorkerExited(RuntimeError):
    """A worker process exited before it was ready."""


@dataclass
class _Slot:
    index: int
    stdout: Path
    stderr: Path
    incarnation: int = 0
    process: asyncio.subprocess.Process | None = None
    ready_offset: int = 0
    """Where this incarnation's output starts in ``stdout`` (the file is appended to)."""


@dataclass
class ChaosWorkers:
    """``count`` worker slots; ``command(slot, incarnation)`` says how to start one."""

    command: Callable[[int, int], WorkerCommand]
    count: int
    logs: Path
    unplanned_exits: int = 0
    deploy_exits: list[float] = field(default_factory=list)
    """Seconds from SIGTERM to exit of each deployed worker (to its SIGKILL's exit: a slow one)."""
    stop_exits: list[float] = field(default_factory=list)
    """The same for the workers of the final stop."""
    failed_deploys: int = 0
    """Deployed workers still there `EXIT_DEADLINE_S` after SIGTERM (then SIGKILLed)."""
    _slots: list[_Slot] = field(default_factory=list)

    @property
    def stderr_files(self) -> list[Path]:
        return [slot.stderr for slot in self._slots]

    async def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        for n in range(self.count):
            slot = _Slot(n, self.logs / f"worker{n}.stdout", self.logs / f"worker{n}.stderr")
            self._slots.append(slot)
            await self._spawn(slot)
        await asyncio.gather(*(self._ready(slot) for slot in self._slots))

    async def kill(self, index: int) -> None:
        """SIGKILL the slot's worker (no shutdown, its claims stay leased) and start another."""
        slot = self._slots[index % self.count]
        if slot.process is not None and slot.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                slot.process.kill()
            await slot.process.wait()
        await self._restart(slot)

    async def deploy(self, index: int) -> None:
        """Restart the slot's worker gracefully: SIGTERM, wait for it to exit (SIGKILL at
        `EXIT_DEADLINE_S`: a failed deploy), start another. One that had already exited is
        counted as an unplanned exit and started again."""
        slot = self._slots[index % self.count]
        if slot.process is not None and slot.process.returncode is None:
            seconds, exited = await self._terminate(slot.process)
            self.deploy_exits.append(seconds)
            self.failed_deploys += not exited
        else:
            self.unplanned_exits += 1
        await self._restart(slot)

    async def revive(self) -> None:
        """Start again any worker that exited without being told to (counted)."""
        for slot in self._slots:
            if slot.process is not None and slot.process.returncode is not None:
                self.unplanned_exits += 1
                await self._restart(slot)

    async def stop(self) -> None:
        """SIGTERM every worker at once, SIGKILL whichever outlives `EXIT_DEADLINE_S`."""
        running = [
            slot.process
            for slot in self._slots
            if slot.process is not None and slot.process.returncode is None
        ]
        exits = await asyncio.gather(*(self._terminate(process) for process in running))
        self.stop_exits.extend(seconds for seconds, _ in exits)

    async def _terminate(self, process: asyncio.subprocess.Process) -> tuple[float, bool]:
        """SIGTERM ``process`` and wait until it exits: (seconds it took, whether it exited
        within `EXIT_DEADLINE_S`; if not, it was SIGKILLed, and took longer)."""
        started = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        exited = True
        try:
            await asyncio.wait_for(process.wait(), EXIT_DEADLINE_S)
        except TimeoutError:
            exited = False
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        return time.monotonic() - started, exited

    async def _restart(self, slot: _Slot) -> None:
        """A new incarnation in the slot; one that exits while starting is retried (counted)."""
        for tries in range(1, START_TRIES + 1):
            await self._spawn(slot)
            try:
                await self._ready(slot)
                return
            except WorkerExited:
                if tries == START_TRIES:
                    raise
                self.unplanned_exits += 1

    async def _spawn(self, slot: _Slot) -> None:
        slot.incarnation += 1
        command = self.command(slot.index, slot.incarnation)
        slot.ready_offset = slot.stdout.stat().st_size if slot.stdout.exists() else 0
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        with slot.stdout.open("ab") as stdout, slot.stderr.open("ab") as stderr:
            slot.process = await asyncio.create_subprocess_exec(
                *command.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env={**os.environ, "PYTHONPATH": path, **command.env},
                start_new_session=True,
            )

    async def _ready(self, slot: _Slot) -> None:
        async def output() -> str:
            assert slot.process is not None
            if slot.process.returncode is not None:
                raise WorkerExited(
                    f"worker {slot.index} exited with {slot.process.returncode} at start"
                    f" (see {slot.stderr})"
                )
            with slot.stdout.open("rb") as handle:
                handle.seek(slot.ready_offset)
                return handle.read().decode(errors="replace")

        await wait_until(
            output,
            lambda text: READY.search(text) is not None,
            timeout_s=READY_DEADLINE_S,
            what=f"worker {slot.index} ready",
        )
