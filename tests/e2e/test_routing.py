"""Binding-aware routing: a head runs only on a worker that has its agent's binding.

Two real `threadwarden worker` processes on one task queue with disjoint bindings (alpha, beta):
every submission completes on the process that has its agent, and no pass records a binding
retry. With beta's only worker gone, beta's work waits in binding retry (the protocol's durable
backoff, unchanged) and completes once a worker with beta starts again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.helpers.checks import assert_settled_once, converged
from tests.helpers.polling import eventually
from tests.helpers.processes import worker_process
from threadwarden.client.client import ThreadwardenClient
from threadwarden.worker.runtime import Connections
from threadwarden.worker.settings import Settings

AGENTS = "tests.helpers.routing_agents"
BINDING_RETRY_LOG = "awaits a compatible binding"
PER_AGENT = 4


def binding_retries_logged(*folders: Path) -> list[str]:
    """The binding-retry lines the workers logged (the first of each entry is an error)."""
    return [
        line
        for folder in folders
        for line in (folder / "stderr").read_text().splitlines()
        if BINDING_RETRY_LOG in line
    ]


async def test_disjoint_bindings_each_agent_runs_on_its_worker_with_no_binding_retry(
    settings: Settings,
    connections: Connections,
    client: ThreadwardenClient,
    tmp_path: Path,
    ids: str,
) -> None:
    alpha_dir, beta_dir = tmp_path / "alpha", tmp_path / "beta"
    async with (
        worker_process(settings, connections, alpha_dir, bindings=f"{AGENTS}:ALPHA") as alpha,
        worker_process(settings, connections, beta_dir, bindings=f"{AGENTS}:BETA") as beta,
    ):
        threads = {
            f"{ids}-{agent}-{n}": agent for agent in ("alpha", "beta") for n in range(PER_AGENT)
        }
        await asyncio.gather(
            *(client.submit(t, agent_id=a, input={"n": 1}) for t, a in threads.items())
        )
        for thread, agent in threads.items():
            status = await assert_settled_once(client, thread, 1)
            [view] = status.submissions
            assert (view.outcome, view.attempts) == ("completed", 1), view
            [settlement] = [r for r in await client.records(thread) if r["kind"] == "settlement"]
            expected = alpha.pid if agent == "alpha" else beta.pid
            assert settlement["body"]["result"] == {"agent": agent, "pid": expected}
            host = await converged(client, thread)
            assert host.binding_retries == [] and host.retry is None
    assert binding_retries_logged(alpha_dir, beta_dir) == []


async def test_with_its_only_worker_stopped_an_agent_waits_in_binding_retry_then_completes(
    settings: Settings,
    connections: Connections,
    client: ThreadwardenClient,
    tmp_path: Path,
    ids: str,
) -> None:
    alpha_dir = tmp_path / "alpha"
    async with worker_process(settings, connections, alpha_dir, bindings=f"{AGENTS}:ALPHA"):
        async with worker_process(
            settings, connections, tmp_path / "beta", bindings=f"{AGENTS}:BETA"
        ):
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

        async with worker_process(
            settings, connections, tmp_path / "beta-again", bindings=f"{AGENTS}:BETA"
        ) as beta:
            status = await assert_settled_once(client, ids, 1)
            [view] = status.submissions
            assert (view.outcome, view.attempts) == ("completed", 1)
            [settlement] = [r for r in await client.records(ids) if r["kind"] == "settlement"]
            assert settlement["body"]["result"] == {"agent": "beta", "pid": beta.pid}
            host = await converged(client, ids)
            assert host.binding_retries == []
    # The alpha worker ran beta's passes (the workflows): it recorded the binding retry, it
    # never claimed beta's head.
    assert any(
        "agent beta: no worker with its binding" in line
        for line in binding_retries_logged(alpha_dir)
    )


async def test_during_a_rolling_deploy_pinned_work_runs_only_on_the_matching_digest(
    settings: Settings,
    connections: Connections,
    client: ThreadwardenClient,
    tmp_path: Path,
    ids: str,
) -> None:
    old_dir, new_dir = tmp_path / "v1", tmp_path / "v2"
    async with (
        worker_process(settings, connections, old_dir, bindings=f"{AGENTS}:ALPHA") as old,
        worker_process(settings, connections, new_dir, bindings=f"{AGENTS}:ALPHA_V2") as new,
    ):
        pinned = {f"{ids}-v1-{n}": "alpha-v1" for n in range(PER_AGENT)}
        pinned |= {f"{ids}-v2-{n}": "alpha-v2" for n in range(PER_AGENT)}
        await asyncio.gather(
            *(
                client.submit(t, agent_id="alpha", input={"n": 1}, agent_digest=digest)
                for t, digest in pinned.items()
            )
        )
        for thread, digest in pinned.items():
            status = await assert_settled_once(client, thread, 1)
            assert (status.submissions[0].outcome, status.submissions[0].attempts) == (
                "completed",
                1,
            )
            [settlement] = [r for r in await client.records(thread) if r["kind"] == "settlement"]
            expected = old.pid if digest == "alpha-v1" else new.pid
            assert settlement["body"]["result"] == {"agent": "alpha", "pid": expected}
    assert binding_retries_logged(old_dir, new_dir) == []
