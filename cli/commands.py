"""The CLI's commands that talk to a running threadwarden, one coroutine each (they return the
process exit code): submitting, deciding, reading, ``watch``, ``migrate`` and ``console``. They
stand on the client and the configuration room, never on the worker's rooms: the commands that
run a worker or the embedded stack are `threadwarden.cli.worker_commands`."""

import argparse
import asyncio
import json
import signal
import sys
from contextlib import AbstractAsyncContextManager
from typing import Any

import asyncpg

from threadwarden.cli.output import print_host, print_inbox, print_json, print_thread
from threadwarden.cli.parser import WAIT_FOREVER
from threadwarden.cli.watch import watch as watch_thread
from threadwarden.client.client import ThreadwardenClient
from threadwarden.client.reads import SubmissionResult
from threadwarden.config.connect import connect_configured
from threadwarden.config.connect import resolve as resolve_connections
from threadwarden.config.settings import Settings
from threadwarden.errors import ResultTimeout
from threadwarden.ledger.migrations import current_version
from threadwarden.ledger.migrations import migrate as apply_migrations
from threadwarden.views import OperatorResult, Receipt


async def until_interrupted() -> None:
    """Wait for Ctrl-C or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def console(settings: Settings, args: argparse.Namespace) -> int:
    """The operator console over the configured ledger, until Ctrl-C (docs/console.md)."""
    if args.address is not None:  # validated like the environment (THREADWARDEN_CONSOLE_ADDRESS)
        explicit = {name: getattr(settings, name) for name in settings.model_fields_set}
        settings = type(settings).model_validate({**explicit, "console_address": args.address})
    from threadwarden.console.server import open_console  # its web stack: only when served

    connections = resolve_connections(settings)
    async with open_console(
        settings,
        connections.database_url,
        lambda: connect_configured(settings, connections),
        temporal_ui_url=args.temporal_ui or connections.ui_url,
    ) as url:
        print(f"console {url}", flush=True)
        await until_interrupted()
    return 0


async def migrate(settings: Settings, _: argparse.Namespace) -> int:
    conn = await asyncpg.connect(resolve_connections(settings).database_url)
    try:
        applied = await apply_migrations(conn)
        version = await current_version(conn)
    finally:
        await conn.close()
    print(f"schema at version {version}; applied {applied or 'nothing'}")
    return 0


async def submit(settings: Settings, args: argparse.Namespace, value: Any) -> int:
    async with ThreadwardenClient.connect(settings, resolve_connections(settings)) as client:
        receipt = await client.submit(
            args.thread,
            agent_id=args.agent,
            input=value,
            idempotency_key=args.idempotency_key,
            host_id=args.host,
            agent_digest=args.agent_digest,
            if_busy=args.if_busy,
        )
        if not args.json:
            verb = "admitted" if receipt.created else "already admitted"
            print(
                f"{verb} {receipt.submission_id} on thread {receipt.thread_id}"
                f" (host {receipt.host_id}, sequence {receipt.sequence})",
                flush=True,
            )
            if receipt.interrupted:
                print(f"interrupted {', '.join(receipt.interrupted)}", flush=True)
        for warning in receipt.warnings:
            print(f"threadwarden: warning: {warning}", file=sys.stderr, flush=True)
        if args.wait is None:
            if args.json:
                print_json(receipt.model_dump())
            return 0
        timeout = None if args.wait == WAIT_FOREVER else args.wait
        try:
            result = await client.result(receipt.submission_id, timeout=timeout)
        except ResultTimeout:
            result = None
    return _settlement(args, receipt, result)


WAIT_ENDED = 3
"""``submit --wait``'s exit code when the wait ended before the settlement."""


def _settlement(args: argparse.Namespace, receipt: Receipt, result: SubmissionResult | None) -> int:
    """``submit --wait``'s answer: the settlement, or that the wait ended first (exit 3)."""
    if args.json:
        print_json({**receipt.model_dump(), "settlement": result and result.model_dump()})
    elif result is None:
        print(f"{receipt.submission_id}: not settled after {args.wait:g} s; it goes on")
    elif result.outcome == "completed":
        print(f"completed: {json.dumps(result.result)}")
    else:
        print(f"{result.outcome}: {result.reason}")
    if result is None:
        return WAIT_ENDED
    return 0 if result.outcome == "completed" else 1


async def _report(args: argparse.Namespace, result: OperatorResult, done: str) -> int:
    if args.json:
        print_json(result.model_dump())
    elif not result.changed:
        outcome = f" ({result.outcome})" if result.outcome else ""
        print(f"{result.submission_id}: nothing changed, already {result.state}{outcome}")
    else:
        print(f"{done} {result.submission_id}; {_what_next(result)}")
    return 0


def _what_next(result: OperatorResult) -> str:
    """What a decision means for the submission, in plain words."""
    if result.state == "input-applied":
        return "it resumes"
    if result.state == "running":
        return "it stops at its next step"
    if result.state == "settled":
        return {"completed": "it completed", "failed": "it failed"}.get(
            result.outcome or "", "it is aborted"
        )
    if result.state == "unknown":
        return "it waits for a person to resolve its side effect"
    return f"it is {result.state}"


def _ledger_client(settings: Settings) -> AbstractAsyncContextManager[ThreadwardenClient]:
    """A client that reads and decides in Postgres and connects Temporal only to wake a host
    after a decision that changed something (`ThreadwardenClient.connect`, ``lazy_temporal``)."""
    return ThreadwardenClient.connect(settings, resolve_connections(settings), lazy_temporal=True)


async def approve(settings: Settings, args: argparse.Namespace) -> int:
    async with _ledger_client(settings) as client:
        return await _report(args, await client.approve(args.submission), "approved")


async def deny(settings: Settings, args: argparse.Namespace) -> int:
    async with _ledger_client(settings) as client:
        return await _report(args, await client.deny(args.submission, args.reason), "denied")


async def answer(settings: Settings, args: argparse.Namespace, value: Any) -> int:
    async with _ledger_client(settings) as client:
        return await _report(args, await client.answer(args.submission, value), "answered")


async def resolve(settings: Settings, args: argparse.Namespace, result: Any) -> int:
    async with _ledger_client(settings) as client:
        resolved = await client.resolve(args.submission, args.outcome, result)
        return await _report(args, resolved, f"resolved ({args.outcome})")


async def abort(settings: Settings, args: argparse.Namespace) -> int:
    async with _ledger_client(settings) as client:
        result = await client.abort(args.submission)
    done = "asked to abort" if result.state == "running" else "aborted"
    return await _report(args, result, done)


async def rebuild_projection(settings: Settings, args: argparse.Namespace) -> int:
    async with ThreadwardenClient.connect(settings, resolve_connections(settings)) as client:
        await client.rebuild_projection(args.host)
    if args.json:
        print_json({"host_id": args.host, "rebuilding": True})
    else:
        print(f"thread summaries of host {args.host} dropped; its passes rebuild them")
    return 0


async def watch(settings: Settings, args: argparse.Namespace) -> int:
    database_url = resolve_connections(settings).database_url
    return await watch_thread(
        database_url,
        args.thread,
        as_json=args.json,
        follow=not args.no_follow,
        verbose=args.verbose,
        text=not args.no_text,
    )


async def status(settings: Settings, args: argparse.Namespace) -> int:
    """A thread's or a host's state, read from Postgres only (Temporal may be down)."""
    async with _ledger_client(settings) as client:
        if args.host is not None:
            print_host(await client.host_status(args.host), as_json=args.json)
            return 0
        thread = await client.thread_status(args.thread)
        sent = await client.messages_sent(args.thread)
    print_thread(thread, sent, as_json=args.json)
    return 0


async def inbox(settings: Settings, args: argparse.Namespace) -> int:
    """What waits for a person, oldest first, from Postgres only."""
    async with _ledger_client(settings) as client:
        print_inbox(await client.inbox(limit=args.limit), as_json=args.json)
    return 0
