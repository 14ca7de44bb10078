"""``threadwarden demo``: scripted work on several threads through the real embedded stack.

This module runs it: the stack, the console, the workers and the client around one run.
What is submitted is `demo_scenario`'s, the feed `demo_feed`'s, the following `demo_progress`'s.
"""

import asyncio
import contextlib
import logging
import os
import shlex
import sys
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from temporalio.client import Client

from threadwarden.bindings import Binding
from threadwarden.cli.demo_feed import record_feed, tool_names
from threadwarden.cli.demo_progress import Progress, follow_progress, print_summary, show_graph_turn
from threadwarden.cli.demo_scenario import (
    agent_or_note,
    announce_totals,
    demo_registry,
    demo_thread,
    load_agent,
    load_graph,
    submit_all,
    submit_graph,
    translator_binding,
)
from threadwarden.cli.output import print_line
from threadwarden.cli.stack import embedded_stack, stopped_by_signals
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections, connect_configured
from threadwarden.config.settings import Settings
from threadwarden.ledger.publication import NOTIFY_CHANNEL
from threadwarden.worker.runtime import running_worker

ServeApi = Callable[
    [Settings, str, Callable[[], Awaitable[Client]]], AbstractAsyncContextManager[str]
]
"""Serves the console and its HTTP API while the demo runs (`threadwarden.console.server`'s
``open_console``: the CLI hands it in, the worker room does not import the console)."""


async def run(settings: Settings, serve_api: ServeApi) -> int:
    """Start the stack, submit the scripts, show progress, print the summary, stop."""
    run_id = uuid.uuid4().hex[:6]
    demo_settings = settings.model_copy(update={"data_dir": settings.data_dir / "demo"})
    if "head_start_timeout_ms" not in settings.model_fields_set:
        # The translator is deployed mid-demo: its heads show their binding retry after 5 s,
        # not the production 60 s (THREADWARDEN_HEAD_START_TIMEOUT_MS still wins).
        demo_settings = demo_settings.model_copy(update={"head_start_timeout_ms": 5_000})
    # The demo narrates the translator's binding wait itself: the worker's own warning about
    # it would land in the middle of the progress lines (unless --verbose asked for logs).
    binding_log = logging.getLogger("threadwarden.activities.pass_steps")
    if binding_log.getEffectiveLevel() > logging.INFO:
        binding_log.setLevel(logging.ERROR)
    print_line(f"Starting the embedded stack in {demo_settings.data_dir} …")
    # pydantic-ai takes a second or two to import: in a thread, while the servers start.
    agent = asyncio.ensure_future(asyncio.to_thread(load_agent))
    with stopped_by_signals():  # SIGHUP/SIGTERM stop the stack too (see `dev`)
        try:
            async with embedded_stack(demo_settings.data_dir, record=False) as connections:
                print_line(
                    f"  Temporal {connections.temporal_address}, web UI {connections.ui_url}"
                )
                progress = await _run_scripts(demo_settings, connections, run_id, agent, serve_api)
                print_summary(progress)
                if not progress.succeeded():
                    print(
                        "demo: some submissions or messages did not settle in time",
                        file=sys.stderr,
                    )
                    return 1
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            print("demo: stopped by a signal; the stack is stopped", file=sys.stderr)
            return 1
    print_line("Stack stopped. To browse these hosts in the Temporal UI, start it again with")
    print_line(f"  {_this_command()} --data-dir {demo_settings.data_dir} dev")
    return 0


async def _run_scripts(
    settings: Settings,
    connections: Connections,
    run_id: str,
    loading: Awaitable[Binding | ImportError],
    serve_api: ServeApi,
) -> Progress:
    """Submit, follow the feed and the progress until everything settled. The feed closes
    first (it is entered last), so no feed line lands inside the summary."""
    on_any_port = settings.model_copy(update={"console_address": "127.0.0.1:0"})
    async with (
        contextlib.AsyncExitStack() as workers,
        ThreadwardenClient.connect(settings, connections) as client,
        serve_api(
            on_any_port,
            connections.database_url,
            lambda: connect_configured(settings, connections),
        ) as console_url,
        record_feed(connections.database_url, demo_thread(run_id, ""), tool_names(client)) as feed,
    ):
        api_url = f"{console_url}/v1"
        print_line(f"  console {console_url}, HTTP API {api_url} (while the demo runs)")
        print_line(f"Following the live record feed (LISTEN {NOTIFY_CHANNEL}) …")
        agent, graph = agent_or_note(await loading), load_graph()
        await workers.enter_async_context(
            running_worker(settings, connections, demo_registry(agent, graph))
        )
        threads, delegations, turn = await submit_all(client, run_id, agent, api_url)
        graph_turn = None if graph is None else await submit_graph(client, run_id, graph)
        if graph_turn is not None:
            threads.append(graph_turn.thread_id)
        announce_totals(run_id, threads, delegations)

        async def deploy_translator() -> None:
            await workers.aclose()  # a rolling deploy: the old worker goes away first
            registry = demo_registry(agent, graph)
            registry.register(translator_binding())
            await workers.enter_async_context(running_worker(settings, connections, registry))

        progress = await follow_progress(client, threads, delegations, turn, deploy_translator)
        if graph_turn is not None:
            await show_graph_turn(client, graph_turn)
        missing = await feed.catch_up(client, [s.thread_id for s in progress.statuses])
        late = f" ({missing} not published yet)" if missing else ""
        print_line(f"  feed showed {len(feed.seen)} records{late}")
        progress.streamed, progress.restarted = len(feed.epochs), len(feed.restarted)
        return progress


def _this_command() -> str:
    """How to run ``threadwarden`` again from here: the path this process was started as (the
    venv's script under ``make demo``), so the hint works without an activated venv."""
    started = Path(sys.argv[0])
    if started.name == "threadwarden" and started.exists():
        return shlex.quote(os.path.relpath(started))
    return "threadwarden"
