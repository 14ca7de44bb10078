"""Running the CLI inside a test."""

import asyncio

from threadwarden.worker.cli import main


async def run_cli(*argv: str) -> int:
    """Run the CLI in a thread (it owns its own event loop); return its exit code."""
    return await asyncio.to_thread(main, list(argv))
