"""Record host-workflow histories for the replay tests.

Run ``.venv/bin/python -m tests.workflows.record_histories`` after every change to the
workflow's commands and commit the new files in place of the old ones. Nothing has been
released, so no history outside this repository needs to keep replaying: no patch markers.
"""

import asyncio
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType

from tests.helpers.checks import quiescent
from tests.helpers.hosts import FakeHost
from tests.helpers.polling import eventually
from tests.helpers.workers import with_queued_scripted
from tests.workflows.recording import recording_stack
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections, connect_temporal
from threadwarden.config.settings import Settings
from threadwarden.failpoints import Failpoints
from threadwarden.worker.runtime import running_worker
from threadwarden.workflows.contracts import host_workflow_id
from threadwarden.workflows.host import MAX_PASSES_PER_RUN

HERE = Path(__file__).parent / "histories"
VERSION = "v16"
"""Bump when the workflow's commands change (and delete the older host histories)."""


async def record() -> None:
    async with recording_stack(head_start_timeout_ms=1_000) as (connections, settings):
        failpoints = Failpoints()
        registry = with_queued_scripted()  # scripted heads inline, queued's dispatched
        async with (  # no host plug-in: the head step finishes each pass itself
            running_worker(settings, connections, registry, failpoints=failpoints),
            ThreadwardenClient.connect(settings, connections) as client,
        ):
            await _record_settled(client, connections, "replay-settled", "settled")
            await _record_settled(
                client, connections, "replay-queued", "settled_queued", agent="queued"
            )
            await _record_stalled(client, connections)
            await _record_begin_fault(client, connections, failpoints)
            await _record_chain_break(client, connections)
            await _record_continue_as_new(client, connections)
            await _record_continue_as_new_after_wait(client, connections)
            await _record_admitted_during_pass(client, connections, failpoints)
        await _record_worker_stop(settings, connections, registry, failpoints)
        waves = settings.model_copy(update={"task_queue": f"{settings.task_queue}-waves"})
        # Host waves (with nothing to do: every pass still runs its initial wave) beside the
        # native work: the finish is its own step.
        async with (
            running_worker(waves, connections, host=FakeHost(1_000)),
            ThreadwardenClient.connect(waves, connections) as client,
        ):
            await _record_settled(client, connections, "replay-waves", "settled_with_waves")
            await _record_message(client, connections)
            await _record_backlog(client, connections)
        split = waves.model_copy(
            update={"task_queue": f"{settings.task_queue}-split", "inline_budget_ms": 5_000}
        )
        async with (
            running_worker(split, connections, host=FakeHost(1_000), failpoints=failpoints),
            ThreadwardenClient.connect(split, connections) as client,
        ):
            await _record_heartbeat_split(client, connections, failpoints)
        hung = settings.model_copy(update={"task_queue": f"{settings.task_queue}-hung"})
        async with (  # waves that ignore the end of the native work: each is cut off
            running_worker(hung, connections, host=FakeHost(200, hang=True)),
            ThreadwardenClient.connect(hung, connections) as client,
        ):
            await _record_cut_off_wave(client, connections)


async def _record_settled(
    client: ThreadwardenClient,
    connections: Connections,
    thread: str,
    name: str,
    *,
    agent: str = "scripted",
) -> None:
    for n in range(3):  # several passes in one run, the later ones started by progress
        await client.submit(thread, agent_id=agent, input=[{"say": f"hi {n}"}])
    await eventually(
        lambda: client.thread_status(thread),
        lambda s: all(x.state == "settled" for x in s.submissions),
    )
    await _save(connections, thread, f"host_pass_{name}_{VERSION}.json")


async def _record_stalled(client: ThreadwardenClient, connections: Connections) -> None:
    """A head for an agent no worker has: no worker polls its queue, so it is binding-unavailable
    without a ``run_head`` (a busy worker's head that is not started in time takes the same
    ``head_unstarted`` step after its ``run_head`` times out)."""
    await client.submit("replay-stalled", agent_id="missing", input={})
    await eventually(
        lambda: client.host_status("replay-stalled"),
        lambda h: h.retry is not None and bool(h.binding_retries),
    )
    await _save(connections, "replay-stalled", f"host_pass_stalled_{VERSION}.json")


async def _record_message(client: ThreadwardenClient, connections: Connections) -> None:
    note = {"thread": "replay-inbox", "input": [{"say": "got it"}]}
    await client.submit("replay-sender", agent_id="scripted", input=[{"send": note}])
    await eventually(
        lambda: client.messages_sent("replay-sender"),
        lambda sent: [m.state for m in sent] == ["delivered"],
    )
    await eventually(
        lambda: client.thread_status("replay-inbox"),
        lambda s: [x.state for x in s.submissions] == ["settled"],
    )
    await _save(connections, "replay-sender", f"host_pass_message_{VERSION}.json")


async def _record_backlog(client: ThreadwardenClient, connections: Connections) -> None:
    """More messages than one delivery batch: later batches run only while native work runs,
    the rest in later passes."""
    sends = [
        {"send": {"thread": f"replay-backlog-{n}", "input": [{"say": "hi"}]}} for n in range(12)
    ]
    await client.submit("replay-backlog", agent_id="scripted", input=sends)
    await eventually(
        lambda: client.messages_sent("replay-backlog"),
        lambda sent: len(sent) == 12 and all(m.state == "delivered" for m in sent),
    )
    await eventually(
        lambda: client.host_status("replay-backlog"),
        lambda h: h.processed == h.dirty and h.alarm_at is None,
    )
    await _save(connections, "replay-backlog", f"host_pass_backlog_{VERSION}.json")


async def _record_begin_fault(
    client: ThreadwardenClient, connections: Connections, failpoints: Failpoints
) -> None:
    """A fault after begin committed: the rearm with the observed generation, then a pass."""
    failpoints.arm("maintenance:begin:after", times=1)
    await client.submit("replay-begin-fault", agent_id="scripted", input=[{"say": "hi"}])
    await eventually(
        lambda: client.thread_status("replay-begin-fault"),
        lambda s: [x.state for x in s.submissions] == ["settled"],
    )
    await _save(connections, "replay-begin-fault", f"host_pass_begin_fault_{VERSION}.json")


async def _record_chain_break(client: ThreadwardenClient, connections: Connections) -> None:
    """Inline passes chained in one workflow task until it has run `CHAIN_LIMIT`: then the run
    ends the task with a ``task_break`` activity ("end a long workflow task") before the next
    pass."""
    for _ in range(5):
        await client.submit("replay-chain", agent_id="scripted", input=[{"sleep_ms": 1_500}])
    await eventually(
        lambda: client.thread_status("replay-chain"),
        lambda s: [x.state for x in s.submissions] == ["settled"] * 5,
    )
    await _save(connections, "replay-chain", f"host_pass_chain_break_{VERSION}.json")


async def _record_continue_as_new(client: ThreadwardenClient, connections: Connections) -> None:
    """More passes than a run holds: the ``task_break`` before the continue-as-new (the first
    run is the one saved)."""
    for n in range(105):
        await client.submit("replay-long", agent_id="scripted", input=[{"say": f"{n}"}])
    await eventually(
        lambda: client.thread_status("replay-long"),
        lambda s: len(s.submissions) == 105 and all(x.state == "settled" for x in s.submissions),
        timeout_s=120,
    )
    await _save(connections, "replay-long", f"host_pass_continue_as_new_{VERSION}.json")


async def _record_continue_as_new_after_wait(
    client: ThreadwardenClient, connections: Connections
) -> None:
    """One turn at a time until the run continues as new: each pass ends idle, the run lingers
    and the next turn's wake starts a new task, so the continue-as-new after the last pass of
    the run needs no ``task_break`` (the first run is the one saved)."""
    temporal = await connect_temporal(connections.temporal_address, "default")
    n = 0
    while len([r async for r in temporal.list_workflows(_runs_of("replay-turns"))]) < 2:
        await client.submit("replay-turns", agent_id="scripted", input=[{"say": f"{n}"}])
        await eventually(
            lambda: client.thread_status("replay-turns"),
            lambda s: all(x.state == "settled" for x in s.submissions),
        )
        n += 1
        assert n <= 2 * MAX_PASSES_PER_RUN, "no continue-as-new"
    await _save(connections, "replay-turns", f"host_pass_continue_as_new_after_wait_{VERSION}.json")


async def _record_admitted_during_pass(
    client: ThreadwardenClient, connections: Connections, failpoints: Failpoints
) -> None:
    """A turn admitted while a caught-up pass runs: its admission skips the wake (the pass's
    pre-armed alarm is as early), the finish sees the generation move and the run begins the
    next pass at once instead of waiting for the alarm."""
    thread = "replay-admitted"
    await client.submit(thread, agent_id="scripted", input=[{"say": "first"}])
    await quiescent(client, connections, thread)
    failpoints.arm("maintenance:finish:before", pause=True, times=1)
    await client.wake(thread)
    await failpoints.reached("maintenance:finish:before")
    receipt = await client.submit(thread, agent_id="scripted", input=[{"say": "second"}])
    assert not receipt.wake
    failpoints.release("maintenance:finish:before")
    await eventually(
        lambda: client.thread_status(thread),
        lambda s: [x.state for x in s.submissions] == ["settled"] * 2,
    )
    await quiescent(client, connections, thread)
    await _save(connections, thread, f"host_pass_admitted_during_pass_{VERSION}.json")


def _runs_of(host_id: str) -> str:
    return f"WorkflowId = '{host_workflow_id(host_id)}'"


async def _record_worker_stop(
    settings: Settings, connections: Connections, registry: Any, failpoints: Failpoints
) -> None:
    """A worker shut down while its inline head runs: the head gives its head back, the pass
    ends without a rearm and the run ends its task with a ``task_break``; the next worker
    finishes the work."""
    stopping = settings.model_copy(update={"task_queue": f"{settings.task_queue}-stop"})
    failpoints.arm("attempt:append", pause=True)
    async with ThreadwardenClient.connect(stopping, connections) as client:
        async with running_worker(stopping, connections, registry, failpoints=failpoints) as w:
            await client.submit("replay-stop", agent_id="scripted", input=[{"say": "hi"}])
            await failpoints.reached("attempt:append")
            await w.shutdown()
        failpoints.release_all()
        async with running_worker(stopping, connections, registry, failpoints=failpoints):
            await eventually(
                lambda: client.thread_status("replay-stop"),
                lambda s: [x.state for x in s.submissions] == ["settled"],
            )
    await _save(connections, "replay-stop", f"host_pass_worker_stop_{VERSION}.json")


async def _record_heartbeat_split(
    client: ThreadwardenClient, connections: Connections, failpoints: Failpoints
) -> None:
    """A long ``begin_pass`` then a ``run_head`` local activity (a wave runs beside it), with
    the SDK's workflow-task heartbeat between them: begin's marker lands in one task, the
    head's in the next."""
    failpoints.arm("maintenance:select:after", pause=True, times=1)
    failpoints.arm("attempt:append", pause=True, times=1)
    await client.submit("replay-split", agent_id="scripted", input=[{"say": "hi"}])
    await failpoints.reached("maintenance:select:after")
    await asyncio.sleep(6)  # begin runs 6 s of the workflow task's ~8 s before its heartbeat
    failpoints.release("maintenance:select:after")
    await failpoints.reached("attempt:append")
    temporal = await connect_temporal(connections.temporal_address, "default")
    handle = temporal.get_workflow_handle(host_workflow_id("replay-split"))

    async def markers() -> int:
        events = (await handle.fetch_history()).events
        return sum(1 for e in events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED)

    await eventually(markers, lambda n: n >= 1, what="begin's marker, recorded by the heartbeat")
    failpoints.release("attempt:append")
    await eventually(
        lambda: client.thread_status("replay-split"),
        lambda s: [x.state for x in s.submissions] == ["settled"],
    )
    await _save(connections, "replay-split", f"host_pass_heartbeat_split_{VERSION}.json")


async def _record_cut_off_wave(client: ThreadwardenClient, connections: Connections) -> None:
    await client.submit("replay-hung-wave", agent_id="scripted", input=[{"say": "hi"}])
    await eventually(
        lambda: client.host_status("replay-hung-wave"),
        lambda h: h.processed == h.dirty and h.alarm_at is None,
    )
    await _save(connections, "replay-hung-wave", f"host_pass_wave_cut_off_{VERSION}.json")


async def _save(connections: Connections, host_id: str, name: str) -> None:
    temporal = await connect_temporal(connections.temporal_address, "default")
    handle = temporal.get_workflow_handle(host_workflow_id(host_id))
    described = await handle.describe()
    # The first run of the chain (still running for a stalled host: a partial history replays).
    first = temporal.get_workflow_handle(
        host_workflow_id(host_id),
        run_id=described.raw_description.workflow_execution_info.first_run_id,
    )
    history = await first.fetch_history()
    (HERE / name).write_text(history.to_json())
    print(f"recorded {name}")


if __name__ == "__main__":
    asyncio.run(record())
