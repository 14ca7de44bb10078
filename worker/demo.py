"""``threadwarden demo``: scripted work on several threads through the real embedded stack."""

import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from ledger.models import ThreadStatus
from threadwarden.bindings import AttemptContext, Binding, Completed, Outcome
from worker.cli_output import format_table
from worker.client import ThreadwardenClient
from worker.runtime import default_registry, running_worker
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
TRANSLATOR = "translator"
"""An agent no worker has at first: its work waits (durably) until one is deployed."""
SHARED_HOST_THREADS = ("triage", "digest")
"""These two threads share one host, to show several lanes under one maintenance workflow."""


async def _translate(context: AttemptContext) -> Outcome:
    text = context.input.get("text", "") if isinstance(context.input, dict) else ""
    await context.append("message", {"text": f"bonjour ({text})"})
    return Completed({"translated": text})


def translator_binding() -> Binding:
    """The binding the demo deploys late, to show a durable binding retry."""
    return Binding(agent_id=TRANSLATOR, digest="translator-v1", handler=_translate)


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
            contextlib.AsyncExitStack() as workers,
            ThreadwardenClient.connect(demo_settings, connections) as client,
        ):
            await workers.enter_async_context(running_worker(demo_settings, connections))
            threads = await _submit_all(client, run_id)

            async def deploy_translator() -> None:
                await workers.aclose()  # a rolling deploy: the old worker goes away first
                registry = default_registry()
                registry.register(translator_binding())
                await workers.enter_async_context(
                    running_worker(demo_settings, connections, registry)
                )

            statuses = await _watch(client, threads, deploy_translator)
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
    i18n = f"demo-{run_id}-i18n"
    await client.submit(i18n, agent_id=TRANSLATOR, input={"text": "hello"}, idempotency_key=i18n)
    threads.append(i18n)
    total = sum(len(s) for s in SCRIPTS.values()) + 1
    _line(f"Submitted {total} submissions on {len(threads)} threads (run {run_id}).")
    return threads


def _settled(status: ThreadStatus) -> bool:
    return all(s.state == "settled" for s in status.submissions)


async def _watch(
    client: ThreadwardenClient, threads: list[str], deploy_translator: Callable[[], Awaitable[None]]
) -> list[ThreadStatus]:
    """Show progress; approve what waits for a person; deploy the missing binding once only
    the work that needs it is left."""
    started = time.monotonic()
    last, deployed = "", False
    while True:
        statuses = [await client.thread_status(t) for t in threads]
        subs = [s for status in statuses for s in status.submissions]
        done = sum(s.state == "settled" for s in subs)
        running = sum(s.state == "running" for s in subs)
        waiting = [s for s in subs if s.waiting_for is not None]
        line = f"  settled {done}/{len(subs)}, running {running}, waiting {len(waiting)}"
        if line != last:
            _line(f"{line}  ({time.monotonic() - started:4.1f}s)")
            last = line
        for sub in waiting:
            if sub.waiting_for == "approval":
                _line(f"  {sub.submission_id} waits for an approval: approving it")
                await client.approve(sub.submission_id)
        blocked = [s for s in waiting if s.waiting_for == "binding"]
        if not deployed and blocked and done + len(blocked) == len(subs):
            _line(
                f"  {blocked[0].submission_id} waits for a binding of agent"
                f" {blocked[0].agent_id!r} (durable retry 5, 10, 20 … s): deploying a worker"
                " that has it"
            )
            await deploy_translator()
            deployed = True
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
