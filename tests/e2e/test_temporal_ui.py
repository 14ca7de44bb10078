"""What the Temporal UI shows of threadwarden: a summary on every activity naming its step and
subject, the host workflow's current details (phase, next alarm, heads and their waits, the
running head), and search attributes written at most once per pass."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client

from tests.helpers.checks import quiescent
from tests.helpers.history import step_summaries
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers, with_queued_scripted
from threadwarden.client.client import ThreadwardenClient
from threadwarden.workflows.contracts import host_workflow_id

SLOW = [{"say": "before"}, {"sleep_ms": 3_000}, {"say": "after"}]
_MARKER = EventType.EVENT_TYPE_MARKER_RECORDED


async def _details(temporal: Client, host: str) -> str:
    handle = temporal.get_workflow_handle(host_workflow_id(host))
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return str(metadata.current_details)


async def test_a_running_submission_shows_in_the_details_and_every_step_is_summarised(
    workers: Workers, client: ThreadwardenClient, temporal_client: Client, ids: str
) -> None:
    async with workers.running(with_queued_scripted()):
        receipt = await client.submit(ids, agent_id="queued", input=SLOW)
        await eventually(
            lambda: client.thread_status(ids),
            lambda s: s.submissions[0].state == "running",
            what="the head running",
        )
        running = await _details(temporal_client, ids)
        assert f"running `{receipt.submission_id}` on thread `{ids}` (agent `queued`)" in running
        await eventually(
            lambda: client.thread_status(ids),
            lambda s: s.submissions[0].state == "settled",
            what="settled",
        )
        await quiescent(client, workers.connections, ids)
        inline = f"{ids}-inline"
        quick = await client.submit(inline, agent_id="scripted", input=[{"say": "hi"}])
        await client.result(quick.submission_id, timeout=60)
        await quiescent(client, workers.connections, inline)
    history = await temporal_client.get_workflow_handle(host_workflow_id(ids)).fetch_history()
    events = list(history.events)
    heads = step_summaries(events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    assert f"run_head {receipt.submission_id} on {ids} (agent queued)" in heads
    # An inline binding's head, with nothing else of its pass due, runs inside begin_pass: the
    # whole pass is that one local activity (its summary names the host).
    handle = temporal_client.get_workflow_handle(host_workflow_id(inline))
    inline_events = list((await handle.fetch_history()).events)
    assert not step_summaries(inline_events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    assert set(step_summaries(inline_events, _MARKER)) == {f"begin_pass {inline}"}
    assert (await client.result(quick.submission_id)).outcome == "completed"
    steps = step_summaries(events, EventType.EVENT_TYPE_MARKER_RECORDED)
    assert f"begin_pass {ids}" in steps, steps
    # Written after a pass, never per head: at most one upsert per pass, none naming a head.
    upserts = [
        e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
        for e in events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
    ]
    passes = sum(s == f"begin_pass {ids}" for s in steps)
    assert 0 < len(upserts) <= passes, (len(upserts), passes)
    assert not any("ThreadwardenSubmission" in fields for fields in upserts)


async def test_the_current_details_list_the_heads_and_what_they_wait_for(
    workers: Workers, client: ThreadwardenClient, temporal_client: Client, ids: str
) -> None:
    failpoints = workers.failpoints
    # A wake during the first pass brings a caught-up pass right after it, in the same run: it
    # reads no heads (nothing changed in the lanes), and the details must keep showing them.
    failpoints.arm("maintenance:finish:after", pause=True, times=1)
    async with workers.running():
        receipt = await client.submit(
            ids, agent_id="scripted", input=[{"approval": "refund 10 EUR"}, {"say": "done"}]
        )
        await failpoints.reached("maintenance:finish:after")
        passes = (await client.host_status(ids)).pass_epoch
        await client.wake(ids, reason="test")
        failpoints.release("maintenance:finish:after")
        await eventually(
            lambda: client.host_status(ids),
            lambda h: h.pass_epoch > passes,
            what="a caught-up pass",
        )
        await quiescent(client, workers.connections, ids)
        assert (await client.thread_status(ids)).submissions[0].waiting_for == "approval"
        details = await _details(temporal_client, ids)
    assert "last pass: caught-up" in details and "waits for approval" in details, details
    assert f"- `{ids}`: `{receipt.submission_id}` suspended (agent `scripted`," in details
    assert "refund" not in details  # payload never shows
    assert details.startswith("**idle**") or details.startswith("**waiting**"), details
