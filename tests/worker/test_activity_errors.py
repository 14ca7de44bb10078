"""Errors at the activity boundary: fencing is benign and one line, the rest a typed failure."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ApplicationErrorCategory
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from threadwarden.activities.errors import domain_errors
from threadwarden.config.connect import connect_temporal
from threadwarden.errors import (
    PoolExhausted,
    StaleAttempt,
    StalePass,
    ThreadwardenError,
)

ERRORS: dict[str, ThreadwardenError] = {
    "StalePass": StalePass("host h: pass epoch 3 is stale (current 4)"),
    "StaleAttempt": StaleAttempt("submission s: attempt a lost its ownership"),
    "PoolExhausted": PoolExhausted("database pool: no connection free within 5000 ms"),
}


@domain_errors
async def step(name: str) -> None:
    raise ERRORS[name]


@pytest.mark.parametrize("name", ["StalePass", "StaleAttempt"])
async def test_fencing_is_a_benign_non_retryable_error_logged_in_one_line(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ApplicationError) as raised:
        await step(name)
    error = raised.value
    assert error.category == ApplicationErrorCategory.BENIGN
    assert error.type == name
    assert error.non_retryable
    assert error.message == str(ERRORS[name])
    lines = [r for r in caplog.records if r.name == "threadwarden.activities.errors"]
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (logging.WARNING, f"step superseded: {ERRORS[name]}")
    ]
    assert all(r.exc_info is None for r in caplog.records)


async def test_other_threadwarden_errors_stay_ordinary_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ApplicationError) as raised:
        await step("PoolExhausted")
    assert raised.value.category == ApplicationErrorCategory.UNSPECIFIED
    assert raised.value.type == "PoolExhausted"
    assert raised.value.non_retryable
    assert not [r for r in caplog.records if r.name == "threadwarden.activities.errors"]


@activity.defn(name="fenced_step")
@domain_errors
async def fenced_step(name: str) -> None:
    raise ERRORS[name]


@workflow.defn(name="FencingProbe")
class FencingProbe:
    """Runs ``fenced_step`` as a local and as a remote activity; reports what came back."""

    @workflow.run
    async def run(self, name: str) -> list[str]:
        seen: list[str] = []
        for local in (True, False):
            try:
                if local:
                    await workflow.execute_local_activity(
                        fenced_step,
                        name,
                        start_to_close_timeout=timedelta(seconds=30),
                        retry_policy=RetryPolicy(maximum_attempts=5),
                    )
                else:
                    await workflow.execute_activity(
                        fenced_step,
                        name,
                        start_to_close_timeout=timedelta(seconds=30),
                        retry_policy=RetryPolicy(maximum_attempts=5),
                    )
            except ActivityError as error:  # a remote activity: the cause inside
                cause = error.cause
                assert isinstance(cause, ApplicationError)
                seen.append(f"{cause.type}:{cause.category.name}:{cause.non_retryable}")
            except ApplicationError as cause:  # a local activity raises it itself
                seen.append(f"{cause.type}:{cause.category.name}:{cause.non_retryable}")
        return seen


async def test_a_real_worker_reports_fencing_as_benign_without_a_traceback(
    temporal: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = await connect_temporal(temporal, "default")
    queue = f"fencing-{uuid.uuid4().hex[:8]}"
    caplog.set_level(logging.DEBUG)
    async with Worker(
        client,
        task_queue=queue,
        workflows=[FencingProbe],
        activities=[fenced_step],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        seen = await client.execute_workflow(
            FencingProbe.run,
            "StalePass",
            id=f"fencing-probe-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            execution_timeout=timedelta(seconds=60),
        )
    # Non-retryable although the policy allows five attempts: one attempt each.
    assert seen == ["StalePass:BENIGN:True", "StalePass:BENIGN:True"]
    ours = [r for r in caplog.records if r.name == "threadwarden.activities.errors"]
    assert [r.levelno for r in ours] == [logging.WARNING, logging.WARNING]
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING and r.exc_info]
    assert loud == [], [r.getMessage() for r in loud]
