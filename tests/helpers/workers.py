"""Workers for end-to-end tests: `Workers` starts a test's own, on its settings, connections and
failpoints; registries of the default bindings plus the test's own."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from temporalio.worker import Worker

from tests.helpers.processes import worker_process
from threadwarden.bindings import Binding, BindingRegistry
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.failpoints import Failpoints
from threadwarden.hosts import HostMaintenance
from threadwarden.publication import PublicationSink
from threadwarden.scripted import scripted_binding
from threadwarden.worker.plugin import default_registry
from threadwarden.worker.runtime import running_worker


@dataclasses.dataclass(frozen=True)
class Workers:
    """Starts a test's own workers on its settings, connections and failpoints: in this process
    (`running`) or as `threadwarden worker` processes (`process`, output under ``folder``)."""

    settings: Settings
    connections: Connections
    failpoints: Failpoints
    folder: Path

    def tuned(self, **changes: Any) -> Workers:
        """The same, with ``changes`` to the settings (for every worker started from it)."""
        return dataclasses.replace(self, settings=self.settings.model_copy(update=changes))

    @contextlib.asynccontextmanager
    async def running(
        self,
        registry: BindingRegistry | None = None,
        *,
        sinks: Sequence[PublicationSink] = (),
        host: HostMaintenance | None = None,
        sweeper: bool = True,
        stop_paused: bool = False,
    ) -> AsyncIterator[Worker]:
        """`running_worker` until the block exits. Failpoints are released before it stops (a
        pass paused at one would hold the shutdown until its step times out), unless
        ``stop_paused``: then the steps paused at one are cancelled by the stop, never let on."""
        async with running_worker(
            self.settings,
            self.connections,
            registry,
            failpoints=self.failpoints,
            sinks=sinks,
            host=host,
            sweeper=sweeper,
        ) as worker:
            try:
                yield worker
            finally:
                if not stop_paused:
                    self.failpoints.release_all()

    def process(
        self, name: str, *, bindings: str | None = None
    ) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
        """A `threadwarden worker` process (`worker_process`) with its output in ``name``."""
        return worker_process(
            self.settings, self.connections, self.folder / name, bindings=bindings
        )


QUEUED = "queued"
"""A copy of the built-in scripted binding that is not inline: its heads are dispatched to its
agent queue as regular activities."""


def with_bindings(*bindings: Binding) -> BindingRegistry:
    """The default registry (the built-in inline ``scripted``) plus ``bindings``."""
    registry = default_registry()
    for binding in bindings:
        registry.register(binding)
    return registry


def with_queued_scripted() -> BindingRegistry:
    """The default registry (the inline ``scripted``) plus its non-inline copy, `QUEUED`."""
    return with_bindings(dataclasses.replace(scripted_binding(), agent_id=QUEUED, inline=False))
