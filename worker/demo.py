"""``threadwarden demo``: scripted work on several threads through the real embedded stack."""

import asyncio
import sys
import time
import uuid
from typing import Any

from ledger.models import ThreadStatus
from worker.cli_output import format_table
from worker.client import ThreadwardenClient
from worker.runtime import running_worker
from worker.settings import Settings
from worker.stack import embedded_stack

SETTLE_TIMEOUT_S = 180

SCRIPTS: dict[str, list[list[dict[str, Any]]]] = {
    "research": [
        [{"say": "Looking up the release notes."}, {"tool": "search", "args": {"q": "beta.96"}}],
        [{"say": "Summarising."}, {"sleep_ms": 300}, {"say": "Backoff is durable now."}],
        [{"tool": "write_file", "args": {"path": "notes.md"}, "side_effect": True}],
    ],
    "support": [
        [{"say": "Hello! Checking your order."}, {"tool": "orders.get", "args": {"id": 42}}],
        [{"say": "Refund needs a manager."}, {"approval": "refund over limit"}],
        [{"say": "Anything else?"}],
    ],
    "billing": [
        [{"tool": "invoices.list", "args": {"month": "2026-11"}}],
        [{"fail": "payment provider unreachable"}],
        [{"say": "Retried with the backup provider."}, {"sleep_ms": 200}],
    ],
    "ops": [
        [{"say": "Deploy window opens."}, {"sleep_ms": 500}],
        [{"tool": "deploy", "args": {"service": "api"}, "side_effect": True}],
        [{"say": "Deploy finished."}],
    ],
    "triage": [
        [{"say": "New bug report."}, {"tool": "labels.add", "args": {"label": "bug"}}],
        [{"say": "Assigned to on-call."}],
    ],
    "digest": [
        [{"say": "Daily digest ready."}],
        [{"say": "Sent to 3 channels."}, {"sleep_ms": 100}],
    ],
}
SHARED_HOST_THREADS = ("triage", "digest")
"""These two threads share one host, to show several lanes under one maintenance workflow."""


def _line(text: str) -> None:
    print(text, flush=True)


async def run(settings: Settings) -> int:
    """Start the stack, submit the scripts, show progress, print the summary, stop."""
    run_id = uuid.uuid4().hex[:6]
    demo_settings = settings.model_copy(update={"data_dir": settings.data_dir / "demo"})
    _line(f"Starting the embedded stack in {demo_settings.data_dir} …")
    async with embedded_stack(demo_settings.data_dir, record=False) as connections:
        _line(f"  Temporal {connections.temporal_address}, web UI {connections.ui_url}")
        async with (
            running_worker(demo_settings, connections),
            ThreadwardenClient.connect(demo_settings, connections) as client,
        ):
            threads = await _submit_all(client, run_id)
            statuses = await _watch(client, threads)
            _summary(statuses, connections.ui_url)
            if not all(_settled(s) for s in statuses):
                print("demo: some submissions did not settle in time", file=sys.stderr)
                return 1
    _line("Stack stopped. To browse these hosts in the Temporal UI, run")
    _line(f"  threadwarden --data-dir {demo_settings.data_dir} dev")
    return 0


async def _submit_all(client: ThreadwardenClient, run_id: str) -> list[str]:
    threads = []
    shared_host = f"demo-{run_id}-shared"
    for name, scripts in SCRIPTS.items():
        thread = f"demo-{run_id}-{name}"
        host = shared_host if name in SHARED_HOST_THREADS else None
        for n, script in enumerate(scripts):
            await client.submit(
                thread,
                agent_id="scripted",
                input=script,
                host_id=host,
                idempotency_key=f"{thread}-{n}",
            )
        threads.append(thread)
    total = sum(len(s) for s in SCRIPTS.values())
    _line(f"Submitted {total} submissions on {len(threads)} threads (run {run_id}).")
    return threads


def _settled(status: ThreadStatus) -> bool:
    return all(s.state == "settled" for s in status.submissions)


async def _watch(client: ThreadwardenClient, threads: list[str]) -> list[ThreadStatus]:
    started = time.monotonic()
    last = ""
    while True:
        statuses = [await client.thread_status(t) for t in threads]
        subs = [s for status in statuses for s in status.submissions]
        done = sum(s.state == "settled" for s in subs)
        running = sum(s.state == "running" for s in subs)
        line = f"  settled {done}/{len(subs)}, running {running}"
        if line != last:
            _line(f"{line}  ({time.monotonic() - started:4.1f}s)")
            last = line
        if done == len(subs) or time.monotonic() - started > SETTLE_TIMEOUT_S:
            return statuses
        await asyncio.sleep(0.25)


def _summary(statuses: list[ThreadStatus], ui_url: str | None) -> None:
    rows = []
    for status in statuses:
        outcomes = [s.outcome for s in status.submissions]
        failed = [s.reason for s in status.submissions if s.outcome == "failed"]
        rows.append(
            [
                status.thread_id,
                status.host_id,
                len(outcomes),
                outcomes.count("completed"),
                outcomes.count("failed"),
                "; ".join(r or "" for r in failed)[:60],
            ]
        )
    _line("")
    _line(format_table(["thread", "host", "subs", "completed", "failed", "failure reasons"], rows))
    _line("")
    _line(f"Temporal UI (while the stack runs): {ui_url}  — workflows threadwarden-host/…")
