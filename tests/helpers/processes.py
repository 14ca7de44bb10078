"""Real processes: workers for tests that kill them (SIGKILL), not just stop them, the console
script's worker run in a user's own project folder, and programs run to their end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from tests.helpers.cli import CONSOLE_SCRIPT
from tests.helpers.polling import eventually
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
READY = "threadwarden worker on task queue"
STOP_TIMEOUT_S = 30
"""How long a worker stopped with SIGTERM may take to drain before it is killed."""
STICKY_START_TIMEOUT_MS = 1_000
"""The sticky timeout of a `worker_process` whose settings set none: it ends by SIGKILL (the
test's, or at the block's exit), and the hosts it ran would wait the product's 10 s for it before
another worker took their next workflow tasks. (The tests' in-process workers stop gracefully and
keep the product's.)"""


@contextlib.asynccontextmanager
async def worker_process(
    settings: Settings,
    connections: Connections,
    folder: Path,
    *,
    bindings: str | None = None,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Run `threadwarden worker` as a child process until it printed its ready line.

    The process is killed on exit whatever happened; its output stays in ``folder``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "THREADWARDEN_DATABASE_URL": connections.database_url,
        "THREADWARDEN_TEMPORAL_ADDRESS": connections.temporal_address,
        "THREADWARDEN_TASK_QUEUE": settings.task_queue,
        "THREADWARDEN_LEASE_MS": str(settings.lease_ms),
        "THREADWARDEN_LEASE_RENEW_MS": str(settings.lease_renew_ms),
        "THREADWARDEN_SWEEP_INTERVAL_MS": str(settings.sweep_interval_ms),
        "THREADWARDEN_SWEEP_IDLE_INTERVAL_MS": str(settings.sweep_idle_interval_ms),
        "THREADWARDEN_SWEEP_GRACE_MS": str(settings.sweep_grace_ms),
        "THREADWARDEN_MESSAGE_CLAIM_TIMEOUT_MS": str(settings.message_claim_timeout_ms),
        "THREADWARDEN_HEAD_START_TIMEOUT_MS": str(settings.head_start_timeout_ms),
        "THREADWARDEN_INLINE_BUDGET_MS": str(settings.inline_budget_ms),
        "THREADWARDEN_INLINE_QUICK_MS": str(settings.inline_quick_ms),
        "THREADWARDEN_IDLE_LINGER_MS": str(settings.idle_linger_ms),
        "THREADWARDEN_STICKY_START_TIMEOUT_MS": str(_sticky_start_timeout_ms(settings)),
        "THREADWARDEN_DATA_DIR": str(folder / "tw"),
    }
    argv = [sys.executable, "-m", "threadwarden.cli.main", "worker"]
    if bindings is not None:
        argv += ["--bindings", bindings]
    out, err = folder / "stdout", folder / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=ROOT, env=env, stdout=stdout, stderr=stderr
        )
    try:
        await ready_output(process, out, err)
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


@contextlib.asynccontextmanager
async def console_worker(
    folder: Path, env: dict[str, str], *flags: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """Run the installed console script's ``threadwarden worker FLAGS`` in ``folder`` (a user's
    project) with exactly ``env``, until it printed its ready line; yield the process and what
    it printed. Its output stays in ``folder``. On exit it is stopped with SIGTERM, and killed
    only if it would not stop within `STOP_TIMEOUT_S`."""
    out, err = folder / "stdout", folder / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            CONSOLE_SCRIPT, "worker", *flags, cwd=folder, env=env, stdout=stdout, stderr=stderr
        )
    try:
        yield process, await ready_output(process, out, err)
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), timeout=STOP_TIMEOUT_S)
            except TimeoutError:
                process.kill()
                await process.wait()


def _sticky_start_timeout_ms(settings: Settings) -> int:
    """The settings' own sticky timeout when they set one, else `STICKY_START_TIMEOUT_MS`."""
    if "sticky_start_timeout_ms" in settings.model_fields_set:
        return settings.sticky_start_timeout_ms
    return STICKY_START_TIMEOUT_MS


async def ready_output(process: asyncio.subprocess.Process, out: Path, err: Path) -> str:
    """What the worker ``process`` wrote to ``out`` once that holds its ready line; fails with
    the end of ``err`` if the process exits first."""

    async def printed() -> str:
        if process.returncode is not None:
            raise AssertionError(
                f"worker exited with {process.returncode}: {err.read_text()[-2000:]}"
            )
        return out.read_text()

    return await eventually(printed, lambda text: READY in text, timeout_s=60, what="worker ready")


async def run_to_end(
    *argv: str, cwd: Path, env: dict[str, str], timeout_s: float, merge_stderr: bool = False
) -> tuple[int, str, str]:
    """Run ``argv`` to its end (killed if it outlasts ``timeout_s``): its exit code, stdout and
    stderr (with ``merge_stderr``, stderr is interleaved into stdout and comes back empty)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout=timeout_s)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), (err or b"").decode()
