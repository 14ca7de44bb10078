"""Binding-aware routing: a head runs only on a worker that has its agent's binding.

Two real `threadwarden worker` processes on one task queue with disjoint bindings (alpha, beta):
every submission completes on the process that has its agent, and no pass records a binding
retry. With beta's only worker gone, beta's work waits in binding retry (the protocol's durable
backoff, unchanged) and completes once a worker with beta starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.checks import assert_settled_once, converged
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient

AGENTS = "tests.helpers.routing_agents"
BINDING_RETRY_LOG = "awaits a compatible binding"
PER_AGENT = 4


def binding_retries_logged(folder: Path, *names: str) -> list[str]:
    """The binding-retry lines the workers logged (the first of each entry is an error)."""
    return [
        line
        for name in names
        for line in (folder / name / "stderr").read_text().splitlines()
        if BINDING_RETRY_LOG in line
    ]


async def settled_on(client: ThreadwardenClient, thread: str, agent: str, pid: int) -> None:
    """The thread's one submission completed in one attempt, on the process ``pid``."""
    status = await assert_settled_once(client, thread, 1)
    [view] = status.submissions
    assert (view.outcome, view.attempts) == ("completed", 1), view
    [settlement] = [r for r in await client.records(thread) if r["kind"] == "settlement"]
    assert settlement["body"]["result"] == {"agent": agent, "pid": pid}


@dataclass(frozen=True)
class Served:
    """A worker process with the ``bindings`` of that name in `AGENTS`, and the work submitted
    for it: ``agent``, pinned to a digest or not."""

    bindings: str
    agent: str
    pinned: str | None = None


@contextlib.asynccontextmanager
async def each_on_its_worker(
    workers: Workers, client: ThreadwardenClient, ids: str, served: dict[str, Served]
) -> AsyncIterator[list[str]]:
    """Start a worker process per entry (its output in the folder the key names) and submit
    `PER_AGENT` threads for each at once: every one settles once, in one attempt, on its own
    worker. Yields the threads while the workers run; once they stopped, none of them logged a
    binding retry."""
    threads = {f"{ids}-{name}-{n}": name for name in served for n in range(PER_AGENT)}
    async with contextlib.AsyncExitStack() as stack:
        processes = {
            name: await stack.enter_async_context(
                workers.process(name, bindings=f"{AGENTS}:{work.bindings}")
            )
            for name, work in served.items()
        }
        await asyncio.gather(
            *(
                client.submit(
                    thread,
                    agent_id=served[name].agent,
                    input={"n": 1},
                    agent_digest=served[name].pinned,
                )
                for thread, name in threads.items()
            )
        )
        for thread, name in threads.items():
            await settled_on(client, thread, served[name].agent, processes[name].pid)
        yield list(threads)
    assert binding_retries_logged(workers.folder, *served) == []


async def test_disjoint_bindings_each_agent_runs_on_its_worker_with_no_binding_retry(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    disjoint = {"alpha": Served("ALPHA", "alpha"), "beta": Served("BETA", "beta")}
    async with each_on_its_worker(workers, client, ids, disjoint) as threads:
        for thread in threads:
            host = await converged(client, thread)
            assert host.binding_retries == [] and host.retry is None


async def test_with_its_only_worker_stopped_an_agent_waits_in_binding_retry_then_completes(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    async with workers.process("alpha", bindings=f"{AGENTS}:ALPHA"):
        async with workers.process("beta", bindings=f"{AGENTS}:BETA"):
            pass  # beta's only worker came up and is gone again
        receipt = await client.submit(ids, agent_id="beta", input={"n": 1})
        host = await eventually(
            lambda: client.host_status(ids),
            lambda h: len(h.binding_retries) == 1,
            what="beta's head in binding retry",
        )
        [entry] = host.binding_retries
        assert entry.submission_id == receipt.submission_id
        assert (await client.thread_status(ids)).submissions[0].state == "ready"

        async with workers.process("beta-again", bindings=f"{AGENTS}:BETA") as beta:
            await settled_on(client, ids, "beta", beta.pid)
            host = await converged(client, ids)
            assert host.binding_retries == []
    # The alpha worker ran beta's passes (the workflows): it recorded the binding retry, it
    # never claimed beta's head.
    assert any(
        "agent beta: no worker with its binding" in line
        for line in binding_retries_logged(workers.folder, "alpha")
    )


async def test_during_a_rolling_deploy_pinned_work_runs_only_on_the_matching_digest(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    pinned = {
        "v1": Served("ALPHA", "alpha", pinned="alpha-v1"),
        "v2": Served("ALPHA_V2", "alpha", pinned="alpha-v2"),
    }
    async with each_on_its_worker(workers, client, ids, pinned):
        pass  # each settled on the worker with its digest
