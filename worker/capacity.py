"""What one worker process polls and what that takes: the agent task queues of its bindings with
their polls, the process's activity budget and the pool sized to serve it (docs/configuration.md,
capacity). `Settings.capacity` fits the configured slots to the pool; this adds the pollers."""

from __future__ import annotations

from threadwarden.bindings import BindingRegistry
from threadwarden.config.settings import Settings, worker_capacity
from threadwarden.workflows import contracts

HEAD_POLLERS = 3
"""Activity polls an agent's task queue keeps open (each holds a slot while it waits). Waiting
polls let the server hand a head over at once instead of from its backlog (bench, 4×25: 1 poll
0.37–0.43 of bare Temporal, 5 polls 0.50–0.53)."""
PINNED_POLLERS = 1
"""Activity polls of an agent-at-digest queue (only submissions pinned to a digest use it)."""
MAIN_POLLERS = 2
"""Activity polls of ``threadwarden worker``'s main task queue (only the auxiliary activities
run there: publication, deliveries, host waves, projection backfill)."""


def head_queues(task_queue: str, registry: BindingRegistry) -> dict[str, int]:
    """The agent task queues a worker with ``registry`` polls, with their polls: per binding,
    the agent's queue (unpinned submissions) and the agent-at-its-digest queue (submissions
    pinned to it)."""
    queues: dict[str, int] = {}
    for agent_id in registry.agent_ids():
        digest = registry.bindings[agent_id].digest
        queues[contracts.head_task_queue(task_queue, agent_id)] = HEAD_POLLERS
        queues[contracts.head_task_queue(task_queue, agent_id, digest)] = PINNED_POLLERS
    return queues


def activity_budget(settings: Settings, registry: BindingRegistry) -> int:
    """Activity slots of one process, shared by the main task queue and the agent queues:
    ``max_concurrent_activities`` plus one per poller, since a waiting poll holds a slot (so an
    idle agent queue never starves a busy one)."""
    pollers = MAIN_POLLERS + sum(head_queues(settings.task_queue, registry).values())
    return worker_capacity(settings).activities + pollers


def pool_size(settings: Settings, registry: BindingRegistry) -> int:
    """Connections a worker's pool needs: one per slot of `activity_budget` and per
    local-activity slot, plus the reserve (`Settings.capacity`). An explicit ``pool_max_size``
    is kept as given; when it is smaller, a worker busy on every queue at once waits for
    connections (up to ``pool_acquire_timeout_ms``, then `PoolExhausted`: the pass retries)."""
    capacity = worker_capacity(settings)
    if settings.pool_max_size is not None:
        return settings.pool_max_size
    return capacity.pool_size + activity_budget(settings, registry) - capacity.activities
