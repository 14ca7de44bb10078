"""The throwaway stack the history-recording scripts (``record_*.py`` here) run on."""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.helpers.stack import TEMPLATE, EmbeddedStack
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings


@contextlib.asynccontextmanager
async def recording_stack(**settings: Any) -> AsyncIterator[tuple[Connections, Settings]]:
    """An embedded PostgreSQL with a migrated database and a Temporal dev server in a temporary
    folder, stopped and removed on exit: their connections, and settings with ``settings`` on a
    fresh task queue with that folder as the data dir."""
    with tempfile.TemporaryDirectory() as tmp:
        stack = EmbeddedStack(Path(tmp))
        try:
            endpoints = await stack.start()
            yield (
                Connections(endpoints.dsn(TEMPLATE), endpoints.temporal_address),
                Settings(task_queue=f"rec-{uuid.uuid4().hex[:6]}", data_dir=Path(tmp), **settings),
            )
        finally:
            stack.stop()
