"""Following the demo until it settles: progress lines, the decisions a person would take
(approvals, the graph's answer, deploying the missing binding), what the message, the
delegation and the agent's and graph's turns came to, and the summary table."""

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from threadwarden.cli.demo_scenario import AgentTurn, Delegation
from threadwarden.cli.output import format_table, print_line
from threadwarden.client.client import ThreadwardenClient
from threadwarden.errors import NotFound
from threadwarden.ledger.messages import Message
from threadwarden.views import SubmissionView, ThreadStatus

SETTLE_TIMEOUT_S = 180
"""How long the demo follows its work before it gives up on what has not settled (exit 1)."""
GRAPH_ANSWER = "M"
"""What the demo answers the LangGraph graph's question (which size) with."""
MODEL_REQUEST = "model-request"
"""The tool name under which an agent binding journals each model request."""


@dataclass
class Progress:
    """One look at the demo's threads and the messages they sent."""

    statuses: list[ThreadStatus]
    messages: list[Message]
    streamed: int = 0
    """Steps whose live text the demo's feed saw."""
    restarted: int = 0
    """Of those, the steps whose text started over (cut off mid-answer, run again): 0 expected."""

    @property
    def submissions(self) -> list[SubmissionView]:
        return [s for status in self.statuses for s in status.submissions]

    @property
    def in_flight(self) -> int:
        return sum(m.state == "pending" for m in self.messages)

    def done(self) -> bool:
        """Nothing will change any more: every submission settled, every message answered
        (delivered or rejected)."""
        return not self.in_flight and all(s.state == "settled" for s in self.submissions)

    def succeeded(self) -> bool:
        return self.done() and all(m.state == "delivered" for m in self.messages)


async def show_graph_turn(client: ThreadwardenClient, turn: AgentTurn) -> None:
    """One line: the graph's outcome and its final state, with the nodes that ran."""
    settled = await client.result(turn.submission_id, timeout=5)
    nodes = [
        r["body"]["node"]
        for r in await client.records(turn.thread_id)
        if r["kind"] == "graph-update" and r["submission_id"] == turn.submission_id
    ]
    shown = json.dumps(settled.result) if settled.outcome == "completed" else settled.reason
    print_line(
        f"  {turn.submission_id} on {turn.thread_id}: LangGraph graph {turn.agent_id!r}"
        f" {settled.outcome} (node updates: {', '.join(nodes)}): {shown}"
    )


async def _answer_question(client: ThreadwardenClient, thread: str, sub: SubmissionView) -> None:
    """Answer what a submission asks (its ``input-requested`` record's payload)."""
    asked = [
        r["body"]["payload"]
        for r in await client.records(thread)
        if r["kind"] == "input-requested" and r["submission_id"] == sub.submission_id
    ]
    question = json.dumps(asked[-1]) if asked else "a question"
    print_line(f"  {sub.submission_id} asks {question}: answering {json.dumps(GRAPH_ANSWER)}")
    await client.answer(sub.submission_id, GRAPH_ANSWER)


async def _look(
    client: ThreadwardenClient, threads: list[str], delegations: list[Delegation]
) -> Progress:
    """Messages first, then statuses: a delivered message's destination thread then already
    exists (acceptance and receipt commit together), so it is looked at in the same round.
    Adds such destinations, and child threads once admitted, to ``threads``: they are the
    demo's threads too."""
    messages = [m for t in threads for m in await client.messages_sent(t)]
    for message in messages:
        if message.state == "delivered" and message.destination_thread_id not in threads:
            threads.append(message.destination_thread_id)
    for child in [c for d in delegations for c in d.child_threads if c not in threads]:
        with contextlib.suppress(NotFound):  # not admitted yet: its parent has not called
            await client.thread_status(child)
            threads.append(child)
    return Progress([await client.thread_status(t) for t in threads], messages)


def _announce(messages: list[Message], announced: set[str]) -> None:
    """One line per message once it left the outbox (each only once)."""
    for message in messages:
        if message.state == "pending" or message.message_id in announced:
            continue
        announced.add(message.message_id)
        route = f"from {message.source_thread_id}"
        if message.state == "delivered":
            print_line(
                f"  message {message.message_id} {route} delivered to"
                f" {message.destination_thread_id} as {message.destination_submission_id}"
            )
        else:
            print_line(
                f"  message {message.message_id} {route} {message.state}: {message.last_error}"
            )


async def _show_delegations(
    client: ThreadwardenClient, progress: Progress, delegations: list[Delegation]
) -> None:
    """One line when a delegating submission waits for its subagent, one when it settled with
    the child's outcome. The wait is read from the parent's records too (``children-awaited``),
    so it is shown even when it fell between two looks."""
    views = {s.submission_id: s for s in progress.submissions}
    for delegation in delegations:
        parent = views.get(delegation.submission_id)
        if parent is None:
            continue
        if not delegation.waiting_shown:
            records = await client.records(delegation.thread_id)
            mine = [r for r in records if r["submission_id"] == delegation.submission_id]
            kinds = {r["kind"] for r in mine}
            if parent.waiting_for == "child" or "children-awaited" in kinds:
                started = [r["body"] for r in mine if r["kind"] == "call-started"]
                children = ", ".join(
                    f"{b['child_submission_id']} on {b['child_thread_id']}" for b in started
                )
                print_line(
                    f"  {parent.submission_id} on {delegation.thread_id} delegated to a subagent"
                    f" ({children}) and waits for it, holding no claim"
                )
                delegation.waiting_shown = True
        if parent.state == "settled" and not delegation.outcome_shown:
            settled = await client.result(parent.submission_id, timeout=5)
            result = settled.result if isinstance(settled.result, dict) else {}
            for child in result.get("children", []):
                print_line(
                    f"  {parent.submission_id} {settled.outcome} with its subagent's result:"
                    f" {child['submission_id']} on {child['thread']} {child['outcome']},"
                    f" {json.dumps(child['result'])}"
                )
            if not result.get("children"):
                print_line(f"  {parent.submission_id} {settled.outcome}: {settled.reason}")
            delegation.outcome_shown = True


async def _show_agent_turn(
    client: ThreadwardenClient, progress: Progress, turn: AgentTurn | None
) -> None:
    """One line once the agent's turn settled: its outcome, what it journaled (model requests
    and tools, from its ``tool-result`` records) and its answer."""
    views = {s.submission_id: s for s in progress.submissions}
    view = views.get(turn.submission_id) if turn is not None else None
    if turn is None or turn.shown or view is None or view.state != "settled":
        return
    settled = await client.result(turn.submission_id, timeout=5)
    tools = [
        r["body"].get("tool")
        for r in await client.records(turn.thread_id)
        if r["kind"] == "tool-result" and r["submission_id"] == turn.submission_id
    ]
    others = ", ".join(str(t) for t in tools if t != MODEL_REQUEST)
    answer = json.dumps(settled.result) if settled.outcome == "completed" else settled.reason
    print_line(
        f"  {turn.submission_id} on {turn.thread_id}: pydantic-ai agent {turn.agent_id!r}"
        f" {settled.outcome} after {tools.count(MODEL_REQUEST)} model requests and the tools"
        f" {others or 'none'}: {answer}"
    )
    turn.shown = True


async def follow_progress(
    client: ThreadwardenClient,
    threads: list[str],
    delegations: list[Delegation],
    turn: AgentTurn | None,
    deploy_translator: Callable[[], Awaitable[None]],
) -> Progress:
    """Show progress; approve what waits for a person; deploy the missing binding once only
    the work that needs it is left."""
    started = time.monotonic()
    last, deployed, announced = "", False, set[str]()
    while True:
        progress = await _look(client, threads, delegations)
        _announce(progress.messages, announced)
        await _show_delegations(client, progress, delegations)
        await _show_agent_turn(client, progress, turn)
        subs = progress.submissions
        done = sum(s.state == "settled" for s in subs)
        running = sum(s.state == "running" for s in subs)
        waiting = [s for s in subs if s.waiting_for is not None]
        thread_of = {s.submission_id: t.thread_id for t in progress.statuses for s in t.submissions}
        line = (
            f"  settled {done}/{len(subs)}, running {running}, waiting {len(waiting)},"
            f" messages in flight {progress.in_flight}"
        )
        if line != last:
            print_line(f"{line}  ({time.monotonic() - started:4.1f}s)")
            last = line
        for sub in waiting:
            if sub.waiting_for == "approval":
                print_line(f"  {sub.submission_id} waits for an approval: approving it")
                await client.approve(sub.submission_id)
            elif sub.waiting_for == "input":
                await _answer_question(client, thread_of[sub.submission_id], sub)
        blocked = [s for s in waiting if s.waiting_for == "binding"]
        if not deployed and blocked and done + len(blocked) == len(subs):
            print_line(
                f"  {blocked[0].submission_id} waits for a binding of agent"
                f" {blocked[0].agent_id!r} (durable retry 5, 10, 20 … s): deploying a worker"
                " that has it"
            )
            await deploy_translator()
            deployed = True
        if progress.done() or time.monotonic() - started > SETTLE_TIMEOUT_S:
            return progress
        await asyncio.sleep(0.25)


def print_summary(progress: Progress) -> None:
    """The table at the end: a row per thread, with its agents, host and outcomes."""
    rows = []
    for status in progress.statuses:
        outcomes = [s.outcome for s in status.submissions]
        failed = [s.reason for s in status.submissions if s.outcome == "failed"]
        agents = sorted({s.agent_id for s in status.submissions})
        rows.append(
            [
                status.thread_id,
                ", ".join(agents),
                status.host_id,
                len(outcomes),
                outcomes.count("completed"),
                outcomes.count("failed"),
                "; ".join(r or "" for r in failed)[:60],
            ]
        )
    print_line("")
    print_line(
        format_table(
            ["thread", "agent", "host", "subs", "completed", "failed", "failure reasons"], rows
        )
    )
    print_line(
        f"live text: {progress.streamed} steps streamed, {progress.restarted} restarted"
        " (started over after a cut-off; 0 expected)"
    )
    print_line("")
