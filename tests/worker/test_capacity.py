"""A worker takes only what its pool can serve: slots and pool are sized together."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.worker import FixedSizeSlotSupplier, Worker

from threadwarden.config.connect import Connections
from threadwarden.config.settings import POOL_RESERVE, Capacity, Settings
from threadwarden.ledger.pool import BoundedPool, create_pool
from threadwarden.worker import runtime
from threadwarden.worker.capacity import HEAD_POLLERS, MAIN_POLLERS, PINNED_POLLERS
from threadwarden.worker.head_workers import HEARTBEAT_THROTTLE, head_heartbeat_throttle
from threadwarden.worker.runtime import running_worker
from threadwarden.worker.slots import SharedSlots


def test_the_default_pool_serves_every_slot_plus_the_reserve() -> None:
    settings = Settings()
    assert POOL_RESERVE == 4
    assert settings.capacity == Capacity(
        workflow_tasks=50, activities=20, local_activities=10, pool_size=34
    )


def test_an_unset_pool_follows_the_configured_slots() -> None:
    settings = Settings(max_concurrent_activities=7, max_concurrent_local_activities=3)
    assert settings.capacity == Capacity(
        workflow_tasks=50, activities=7, local_activities=3, pool_size=7 + 3 + POOL_RESERVE
    )


def test_a_larger_explicit_pool_leaves_the_slots_alone() -> None:
    settings = Settings(pool_max_size=100)
    assert settings.capacity == Capacity(
        workflow_tasks=50, activities=20, local_activities=10, pool_size=100
    )


@pytest.mark.parametrize(
    ("pool", "activities", "local"),
    [
        (10, 4, 2),  # 6 slots in the ratio 20:10
        (33, 19, 10),  # one short
        (5, 1, 1),  # at least one slot of each kind
        (1, 1, 1),
    ],
)
def test_a_smaller_explicit_pool_cuts_the_slots_to_fit(
    pool: int, activities: int, local: int
) -> None:
    capacity = Settings(pool_max_size=pool).capacity
    assert capacity == Capacity(
        workflow_tasks=50,
        activities=activities,
        local_activities=local,
        pool_size=pool,
        shrunk=True,
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_concurrent_workflow_tasks", 1),
        ("max_concurrent_activities", 0),
        ("max_concurrent_local_activities", 0),
        ("pool_max_size", 0),
        ("pool_max_size", 501),
        ("pool_acquire_timeout_ms", 99),
        ("pool_acquire_timeout_ms", 25_001),
        ("sweep_idle_interval_ms", 99),
    ],
)
def test_capacity_settings_are_bounded(field: str, value: int) -> None:
    with pytest.raises(ValidationError, match=field):
        Settings.model_validate({field: value})


def test_the_idle_sweep_interval_is_at_least_the_busy_one() -> None:
    with pytest.raises(ValidationError, match="sweep_idle_interval_ms: expected at least"):
        Settings(sweep_interval_ms=5_000, sweep_idle_interval_ms=4_000)


@pytest.fixture
def created_pools(monkeypatch: pytest.MonkeyPatch) -> list[BoundedPool]:
    """The pools `running_worker` creates (the real `create_pool`, observed)."""
    pools: list[BoundedPool] = []
    real: Callable[..., Awaitable[Any]] = create_pool

    async def observed(*args: Any, **kwargs: Any) -> Any:
        pool = await real(*args, **kwargs)
        assert isinstance(pool, BoundedPool)
        pools.append(pool)
        return pool

    monkeypatch.setattr(runtime, "create_pool", observed)
    return pools


def slots(worker: Worker) -> tuple[int, int, int]:
    """Workflow-task, activity and local-activity slots of a worker's tuner."""
    tuner = worker.config().get("tuner")
    assert tuner is not None
    workflow = tuner._get_workflow_task_slot_supplier()
    activity = tuner._get_activity_task_slot_supplier()
    local = tuner._get_local_activity_task_slot_supplier()
    assert isinstance(workflow, FixedSizeSlotSupplier)
    assert isinstance(activity, SharedSlots)  # shared with the agent queues' workers
    assert isinstance(local, FixedSizeSlotSupplier)
    return workflow.num_slots, activity.slots, local.num_slots


POLLERS = MAIN_POLLERS + HEAD_POLLERS + PINNED_POLLERS
"""The default registry's one binding (scripted) has two agent queues."""


async def test_the_running_worker_has_the_configured_slots_and_pool(
    settings: Settings, connections: Connections, created_pools: list[BoundedPool]
) -> None:
    configured = settings.model_copy(
        update={
            "max_concurrent_workflow_tasks": 9,
            "max_concurrent_activities": 6,
            "max_concurrent_local_activities": 3,
            "pool_acquire_timeout_ms": 1_500,
        }
    )
    async with running_worker(configured, connections) as worker:
        # Every waiting poll holds an activity slot: the pollers are counted on top.
        assert slots(worker) == (9, 6 + POLLERS, 3)
        [pool] = created_pools
        assert pool.get_max_size() == 6 + POLLERS + 3 + POOL_RESERVE
        assert pool.acquire_timeout_ms == 1_500


async def test_a_worker_on_a_small_explicit_pool_runs_fewer_slots_and_says_so(
    settings: Settings,
    connections: Connections,
    created_pools: list[BoundedPool],
    caplog: pytest.LogCaptureFixture,
) -> None:
    small = settings.model_copy(update={"pool_max_size": 10})
    caplog.set_level(logging.WARNING, logger="threadwarden.config.settings")
    async with running_worker(small, connections) as worker:
        assert slots(worker)[1:] == (4 + POLLERS, 2)
        assert [p.get_max_size() for p in created_pools] == [10]  # as given
    warnings = [r.getMessage() for r in caplog.records if r.name == "threadwarden.config.settings"]
    assert set(warnings) == {
        "pool_max_size=10 is below the worker's slots (20 activities + 10 local activities"
        " + 4 reserve): running 4 activities and 2 local activities"
    }


def test_every_setting_is_documented() -> None:
    table = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    missing = [
        f for f in Settings.model_fields if f"| `{f}` | `THREADWARDEN_{f.upper()}` |" not in table
    ]
    assert missing == []


def test_head_heartbeats_reach_the_server_every_lease_renewal() -> None:
    """The head's heartbeat timeout is the lease: with the SDK's throttle at 2 s against the
    tests' 3 s lease, one late second anywhere timed an attempt out under load (issue 19)."""
    short = Settings(lease_ms=3_000, lease_renew_ms=500)
    assert head_heartbeat_throttle(short) == timedelta(milliseconds=500)
    assert head_heartbeat_throttle(Settings()) == HEARTBEAT_THROTTLE  # renewals every 10 s
    assert timedelta(milliseconds=Settings().lease_ms) >= HEARTBEAT_THROTTLE * 3
