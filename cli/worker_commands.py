"""The CLI's commands that run a worker or the embedded stack, or set a namespace up for the
worker: ``worker``, ``dev``, ``demo`` and ``setup``. `threadwarden.cli.main` imports this module
only when one of them runs: the other commands never load the worker's rooms."""

import argparse
import asyncio
import gc
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.service import RPCError, RPCStatusCode

from threadwarden.bindings import BindingRegistry
from threadwarden.cli import demo as demo_module
from threadwarden.cli.commands import until_interrupted
from threadwarden.cli.output import invocation
from threadwarden.cli.stack import embedded_stack, stopped_by_signals
from threadwarden.config.connect import connect_configured
from threadwarden.config.connect import resolve as resolve_connections
from threadwarden.config.endpoints import read_endpoints, write_endpoints
from threadwarden.config.settings import DEFAULT_METRICS_ADDRESS, Settings
from threadwarden.errors import ThreadwardenError
from threadwarden.worker.embedded import free_port
from threadwarden.worker.health import scrape_url
from threadwarden.worker.loading import Plugins, load_plugins, load_registry, served_agents
from threadwarden.worker.plugin import verify_search_attributes
from threadwarden.worker.runtime import running_worker
from threadwarden.workflows.host import SEARCH_ATTRIBUTES


async def demo(settings: Settings, _: argparse.Namespace) -> int:
    from threadwarden.console.server import open_console  # its web stack: only when served

    return await demo_module.run(settings, open_console)


async def dev(settings: Settings, args: argparse.Namespace) -> int:
    registry = load_registry(args.bindings)
    plugins = load_plugins(args.plugins)
    namespace = settings.temporal_namespace
    if settings.metrics_address is None:
        settings = settings.model_copy(update={"metrics_address": f"127.0.0.1:{free_port()}"})
    if "console_address" not in settings.model_fields_set:
        settings = settings.model_copy(update={"console_address": "127.0.0.1:0"})
    # A closed terminal (SIGHUP) or a SIGTERM unwinds the stack like Ctrl-C: nothing it started
    # outlives it (the Temporal server runs in a session of its own and would not hear it).
    with stopped_by_signals():
        try:
            await _run_dev(settings, registry, plugins, namespace)
        except asyncio.CancelledError:  # the signal's cancellation, fully unwound: a clean stop
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
    return 0


async def _run_dev(
    settings: Settings, registry: BindingRegistry, plugins: Plugins, namespace: str
) -> None:
    from threadwarden.console.server import open_console  # its web stack: only when served

    async with (
        embedded_stack(settings.data_dir, record=True) as connections,
        running_worker(settings, connections, registry, sinks=plugins.sinks, host=plugins.host),
        open_console(
            settings,
            connections.database_url,
            lambda: connect_configured(settings, connections),
            temporal_ui_url=connections.ui_url,
        ) as console_url,
    ):
        metrics_url = scrape_url(settings.metrics_bind)
        recorded = read_endpoints(settings.data_dir)
        if recorded is not None:
            urls = replace(
                recorded,
                metrics_url=metrics_url,
                console_url=console_url,
                api_url=f"{console_url}/v1",
            )
            write_endpoints(settings.data_dir, urls)
        print(f"threadwarden dev stack in {settings.data_dir.resolve()}")
        print(f"  temporal   {connections.temporal_address}  (namespace {namespace})")
        print(f"  web ui     {connections.ui_url}")
        print(f"  postgres   {connections.database_url}")
        print(f"  task queue {settings.task_queue}")
        print(f"  agents     {served_agents(registry)}")
        if metrics_url is not None:
            print(f"  metrics    {metrics_url}")
        print(f"  console    {console_url}")
        print(f"  api        {console_url}/v1  (docs/api.md)")
        print(
            f"Ctrl-C to stop. In another shell here: {invocation()} submit / status …", flush=True
        )
        await until_interrupted()


async def worker(settings: Settings, args: argparse.Namespace) -> int:
    registry = load_registry(args.bindings)
    plugins = load_plugins(args.plugins)
    if settings.metrics_address is None:
        settings = settings.model_copy(update={"metrics_address": DEFAULT_METRICS_ADDRESS})
    async with running_worker(
        settings, resolve_connections(settings), registry, sinks=plugins.sinks, host=plugins.host
    ):
        # What start-up loaded (modules, bindings, the SDK) lives as long as the process: out of
        # the collector's generations, a full collection walks only what the passes allocate.
        gc.collect()
        gc.freeze()
        print(
            f"threadwarden worker on task queue {settings.task_queue}; agents:"
            f" {served_agents(registry)}",
            flush=True,
        )
        await until_interrupted()
    return 0


async def setup(settings: Settings, _: argparse.Namespace) -> int:
    """Register the host workflow's search attributes that the namespace lacks, then verify.

    Only attributes already present (from an earlier setup, or one racing this one) are
    fine; anything else that fails is reported as one line naming the step, exit code 1.
    """
    connections = resolve_connections(settings)
    namespace = settings.temporal_namespace
    try:
        client = await connect_configured(settings, connections)
    except RuntimeError as error:
        raise ThreadwardenError(
            f"setup: cannot reach Temporal at {connections.temporal_address}: {error}"
        ) from error
    wanted = {
        key.name: IndexedValueType.ValueType(key.indexed_value_type) for key in SEARCH_ATTRIBUTES
    }
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
    except RPCError as error:
        raise ThreadwardenError(
            f"setup: listing the search attributes of namespace {namespace} failed: {error}"
        ) from error
    missing = {name: kind for name, kind in wanted.items() if name not in listed.custom_attributes}
    if missing:
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
            )
        except RPCError as error:
            if error.status != RPCStatusCode.ALREADY_EXISTS:  # else a racing setup added them
                raise ThreadwardenError(
                    f"setup: registering search attributes {', '.join(missing)} in namespace"
                    f" {namespace} failed: {error}"
                ) from error
    await verify_search_attributes(client)
    present = [name for name in wanted if name not in missing]
    print(
        f"search attributes of namespace {namespace}: registered"
        f" {', '.join(missing) or 'nothing'}; already present {', '.join(present) or 'none'}"
    )
    return 0


COMMANDS: dict[str, Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "demo": demo,
    "dev": dev,
    "worker": worker,
    "setup": setup,
}
"""These commands by name, for `threadwarden.cli.main`."""
