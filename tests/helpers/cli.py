"""Running the CLI inside a test, as a process, and the ledger states its decisions act on."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

from tests.helpers.ledger import BINDINGS
from tests.helpers.polling import eventually
from threadwarden.cli.main import main
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.protocol.decisions import Timing

if TYPE_CHECKING:
    import pytest

CONSOLE_SCRIPT = Path(sys.executable).with_name("threadwarden")
CHARGE = {"tool": "charge", "args": {"cents": 5}, "side_effect": True, "idempotency_key": None}
"""The body of a side-effecting tool call without an idempotency key (its outcome can be
unknown)."""


def user_environment(
    folder: Path, connections: Connections | None = None, settings: Settings | None = None
) -> dict[str, str]:
    """The environment of the console script run in a user's ``folder``: the test process's
    without any threadwarden or Temporal setting, its data dir in ``folder``, plus the test's
    services when given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("THREADWARDEN_", "TEMPORAL_"))}
    env["THREADWARDEN_DATA_DIR"] = str(folder / "tw")
    if connections is not None and settings is not None:
        env |= {
            "THREADWARDEN_DATABASE_URL": connections.database_url,
            "THREADWARDEN_TEMPORAL_ADDRESS": connections.temporal_address,
            "THREADWARDEN_TASK_QUEUE": settings.task_queue,
            "THREADWARDEN_SWEEP_INTERVAL_MS": str(settings.sweep_interval_ms),
            "THREADWARDEN_SWEEP_IDLE_INTERVAL_MS": str(settings.sweep_idle_interval_ms),
            "THREADWARDEN_SWEEP_GRACE_MS": str(settings.sweep_grace_ms),
        }
    return env


async def run_cli(*argv: str) -> int:
    """Run the CLI in a thread (it owns its own event loop); return its exit code."""
    return await asyncio.to_thread(main, list(argv))


class Cli:
    """The CLI's commands in the test's process (each must exit 0), their JSON output read
    back."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys

    async def __call__(self, *argv: str) -> str:
        self._capsys.readouterr()
        code = await run_cli(*argv)
        out = self._capsys.readouterr().out
        assert code == 0, (argv, out)
        return out

    async def submit(self, thread: str, agent: str, value: Any) -> str:
        """Submit ``value`` (any JSON) to ``agent`` on ``thread``; the submission's id."""
        out = await self("submit", thread, "--agent", agent, "--input", json.dumps(value), "--json")
        return str(json.loads(out)["submission_id"])

    async def head(self, thread: str) -> dict[str, Any]:
        status = json.loads(await self("status", "--thread", thread, "--json"))
        head: dict[str, Any] = status["submissions"][-1]
        return head

    async def waiting(self, thread: str, what: str) -> dict[str, Any]:
        return await eventually(
            lambda: self.head(thread),
            lambda head: head["waiting_for"] == what,
            what=f"{thread} waiting for {what}",
        )

    async def settlement(self, thread: str, submission_id: str) -> dict[str, Any]:
        async def settled() -> list[dict[str, Any]]:
            out = await self("watch", thread, "--no-follow", "--json")
            records = [json.loads(line) for line in out.splitlines() if line.strip()]
            return [
                r
                for r in records
                if r["kind"] == "settlement" and r["submission_id"] == submission_id
            ]

        [record] = await eventually(settled, bool, timeout_s=60, what=f"{submission_id} settled")
        body: dict[str, Any] = record["body"]
        return body


def json_error(err: str) -> dict[str, Any]:
    """The one JSON object a failed ``--json`` command wrote on stderr (nothing else)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    report = json.loads(lines[0])
    assert isinstance(report, dict) and set(report) == {"error", "field", "code", "exit_code"}
    return report


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def ledger_rows(pool: asyncpg.Pool[Any], thread: str) -> tuple[Any, ...]:
    """The thread's submissions and records, and its host row: a no-op leaves them equal."""
    submissions = await pool.fetch(
        "SELECT * FROM threadwarden.submissions WHERE thread_id = $1 ORDER BY sequence", thread
    )
    records = await pool.fetch(
        "SELECT * FROM threadwarden.records WHERE thread_id = $1 ORDER BY sequence", thread
    )
    host = await pool.fetchrow(
        "SELECT h.* FROM threadwarden.hosts h JOIN threadwarden.threads t USING (host_id)"
        " WHERE t.thread_id = $1",
        thread,
    )
    return [dict(r) for r in submissions], [dict(r) for r in records], dict(host or {})


async def decide(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    """Run a decision with ``--json``: its exit code, the JSON it printed (or None), stderr."""
    code = await run_cli(*argv, "--json")
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out else None, captured.err


async def unknown_side_effect(pool: asyncpg.Pool[Any], host_id: str) -> str:
    """Admit an ``echo`` submission on thread ``host_id`` and leave it ``unknown``: an attempt
    prepared a side effect without an idempotency key (its ``tool-call`` record) and stopped
    without a result, as a re-run attempt does when it finds such a call. Nothing runs it: no
    worker has the ``echo`` binding. Returns the submission id."""
    receipt = await Admissions(pool, minimum_alarm_delay_ms=50).admit(
        thread_id=host_id, agent_id="echo", input={}, host_id=host_id
    )
    begun = await Maintenance(pool, Timing()).begin(host_id, datetime.now(UTC))
    attempts = Attempts(pool, lease_ms=30_000)
    claim = await attempts.claim_head(host_id, begun.epoch, host_id, bindings=BINDINGS)
    assert claim is not None
    await attempts.append(claim, "message", {"text": "about to charge"}, step=1)
    await attempts.append(claim, "tool-call", CHARGE, step=2)
    await attempts.stop(claim, "unknown")
    return receipt.submission_id


@asynccontextmanager
async def console(env: dict[str, str], *argv: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """The installed console script as a process (stdout and stderr piped), terminated and
    awaited on exit."""
    process = await asyncio.create_subprocess_exec(
        CONSOLE_SCRIPT,
        *argv,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()
