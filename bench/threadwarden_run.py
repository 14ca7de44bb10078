"""The threadwarden side: ``threadwarden worker`` processes, and the client's admissions here.

Each host serves one thread (thread id = host id); each unit is one submission of the built-in
``scripted`` agent with input ``[{"say": "hi"}]``, admitted by `ThreadwardenClient.submit`
(the admission transaction, then the host's wake). A unit is done when its submission is
``settled``; it counts as completed when its outcome is ``completed``.

With ``streams`` (``--streams N``), a console process serves N event streams on the measured
threads for the measured run (`bench.streams`).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from bench.procs import WorkerCommand
from bench.side import Driver
from bench.stack import CONSOLE, connected, with_user
from bench.streams import StreamWatch, console_command, console_streams
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.ledger.migrations import migrate
from threadwarden.workflows.contracts import host_workflow_id, sweeper_workflow_id

AGENT = "scripted"
INPUT = [{"say": "hi"}]
READY = re.compile(r"worker on task queue")
"""What ``threadwarden worker`` prints once it polls its task queue and its sweeper runs."""


class _ThreadwardenDriver:
    def __init__(self, client: ThreadwardenClient) -> None:
        self._client = client

    async def submit(self, host: str, seq: int) -> str:
        receipt = await self._client.submit(host, agent_id=AGENT, input=INPUT, host_id=host)
        return receipt.submission_id


def threadwarden_argv() -> list[str]:
    """The ``threadwarden`` console script beside this interpreter (or on ``PATH``, or the
    module)."""
    script = Path(sys.executable).with_name("threadwarden")
    found = str(script) if script.exists() else shutil.which("threadwarden")
    return [found] if found else [sys.executable, "-m", "threadwarden.cli.main"]


async def migrate_ledger(dsn: str) -> None:
    """Migrate threadwarden's ledger in the database at ``dsn`` (fresh or not)."""
    async with connected(dsn) as conn:
        await migrate(conn)


class ThreadwardenSide:
    name = "threadwarden"

    def __init__(self, streams: int = 0) -> None:
        self.streams = streams
        """Event streams a console process serves during the measured run (0: no console)."""

    count_sql = (
        "SELECT count(*) FROM threadwarden.submissions"
        " WHERE thread_id = ANY($1::text[]) AND state = 'settled'"
    )
    completions_sql = (
        "SELECT submission_id AS key, settled_at AS done_at, outcome = 'completed' AS ok"
        " FROM threadwarden.submissions WHERE thread_id = ANY($1::text[]) AND state = 'settled'"
    )

    async def prepare(self, dsn: str) -> None:
        await migrate_ledger(dsn)

    def worker_command(
        self, dsn: str, temporal_address: str, task_queue: str, data_dir: Path
    ) -> WorkerCommand:
        argv = [*threadwarden_argv(), "worker"]
        env = {
            "THREADWARDEN_DATABASE_URL": dsn,
            "THREADWARDEN_TEMPORAL_ADDRESS": temporal_address,
            "THREADWARDEN_TASK_QUEUE": task_queue,
            "THREADWARDEN_DATA_DIR": str(data_dir),
        }
        return WorkerCommand(argv, env, READY)

    @contextlib.asynccontextmanager
    async def driver(
        self, dsn: str, temporal_address: str, task_queue: str, submissions: int
    ) -> AsyncIterator[Driver]:
        settings = Settings(task_queue=task_queue)
        async with ThreadwardenClient.connect(
            settings, Connections(dsn, temporal_address)
        ) as client:
            yield _ThreadwardenDriver(client)

    @contextlib.asynccontextmanager
    async def alongside(
        self, dsn: str, temporal_address: str, hosts: Sequence[str], logs: Path
    ) -> AsyncIterator[StreamWatch | None]:
        """With `streams`, a console serving that many event streams on ``hosts``' threads."""
        if not self.streams:
            yield None
            return
        command, token = console_command(
            threadwarden_argv(), with_user(dsn, CONSOLE), temporal_address, logs / "console-data"
        )
        async with console_streams(command, token, hosts, self.streams, logs) as watch:
            yield watch

    def workflow_id(self, host: str) -> str:
        return host_workflow_id(host)

    def sweeper_id(self, task_queue: str) -> str:
        return sweeper_workflow_id(task_queue)
