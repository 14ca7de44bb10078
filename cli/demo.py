"""``threadwarden demo``: scripted work on several threads through the real embedded stack."""

import asyncio
import contextlib
import json
import logging
import os
import shlex
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from temporalio.client import Client

from threadwarden.bindings import AttemptContext, Binding, BindingRegistry, Completed, Outcome
from threadwarden.cli.output import format_table
from threadwarden.cli.stack import embedded_stack, stopped_by_signals
from threadwarden.client.client import ThreadwardenClient
from threadwarden.errors import NotFound
from threadwarden.ledger.messages import Message
from threadwarden.ledger.publication import NOTIFY_CHANNEL
from threadwarden.views import SubmissionView, ThreadStatus
from threadwarden.worker.plugin import default_registry
from threadwarden.worker.runtime import Connections, connect_configured, running_worker
from threadwarden.worker.settings import Settings

SETTLE_TIMEOUT_S = 180
GRAPH_ANSWER = "M"
"""What the demo answers the LangGraph graph's question (which size) with."""
FEED_CATCH_UP_S = 5.0
"""How long the demo waits, once everything settled, for the feed to show the last records
(publication runs after the commit, so it may trail the status a little)."""

SCRIPTS: dict[str, list[list[dict[str, Any]]]] = {
    "research": [
        [{"say": "Looking up the release notes."}, {"tool": "search", "args": {"q": "beta.96"}}],
        [
            {"say": "Summarising."},
            {"sleep_ms": 300},
            {"say": "Backoff is durable now."},
            {"send": {"thread": "inbox", "input": [{"say": "Note: backoff is durable now."}]}},
        ],
        [{"tool": "write_file", "args": {"path": "notes.md"}, "side_effect": True}],
    ],
    "support": [
        [{"say": "Hello! Checking your order."}, {"tool": "orders.get", "args": {"id": 42}}],
        [{"say": "Refund needs a manager."}, {"approval": "refund over limit"}],
        [{"say": "Anything else?"}],
    ],
    "billing": [
        [{"tool": "invoices.list", "args": {"month": "2026-11"}}],
        [{"fail": "payment provider unreachable"}],
        [{"say": "Retried with the backup provider."}, {"sleep_ms": 200}],
    ],
    "ops": [
        [{"say": "Deploy window opens."}, {"sleep_ms": 500}],
        [{"tool": "deploy", "args": {"service": "api"}, "side_effect": True}],
        [{"say": "Deploy finished."}],
    ],
    "triage": [
        [{"say": "New bug report."}, {"tool": "labels.add", "args": {"label": "bug"}}],
        [{"say": "Assigned to on-call."}],
    ],
    "digest": [
        [{"say": "Daily digest ready."}],
        [{"say": "Sent to 3 channels."}, {"sleep_ms": 100}],
    ],
    "planner": [
        [
            {"say": "Planning the release: asking a subagent for the changelog."},
            {
                "call": {
                    "thread": "changelog",
                    "input": [
                        {"say": "Collecting merged changes."},
                        {"tool": "git.log", "args": {"since": "beta.95"}},
                        {"sleep_ms": 1500},
                        {"say": "12 changes since beta.95."},
                    ],
                }
            },
            {"say": "Release planned with the changelog."},
        ],
    ],
}
"""Threads, including a ``send`` or ``call`` step's destination, are named without the run
prefix: the run id is only known at start (`_for_run` adds it). ``inbox`` and ``changelog`` get
no work of their own: ``inbox`` exists once research's message is delivered there,
``changelog`` once planner delegates to it (a child submission, on a thread of its own)."""
AGENT_PROMPT = "Order 42 arrived broken. Please refund it."
"""The user turn of the demo's agent thread (`demo_agent`: a lookup, then a refund that a
person approves)."""
MODEL_REQUEST = "model-request"
"""The tool name under which an agent binding journals each model request."""
TRANSLATOR = "translator"
"""An agent no worker has at first: its work waits (durably) until one is deployed."""
SHARED_HOST_THREADS = ("triage", "digest")
"""These two threads share one host, to show several lanes under one maintenance workflow."""


async def _translate(context: AttemptContext) -> Outcome:
    text = context.input.get("text", "") if isinstance(context.input, dict) else ""
    await context.append("message", {"text": f"bonjour ({text})"})
    return Completed({"translated": text})


def translator_binding() -> Binding:
    """The binding the demo deploys late, to show a durable binding retry."""
    return Binding(agent_id=TRANSLATOR, digest="translator-v1", handler=_translate)


def _line(text: str) -> None:
    print(text, flush=True)


def _thread_id(run_id: str, name: str) -> str:
    return f"demo-{run_id}-{name}"


def _for_run(script: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """Point the script's ``send`` and ``call`` steps at this run's threads, so runs never mix."""

    def named(target: dict[str, Any]) -> dict[str, Any]:
        if "thread" not in target:
            return target
        return {**target, "thread": _thread_id(run_id, target["thread"])}

    steps = []
    for step in script:
        if "send" in step:
            step = {"send": named(step["send"])}
        elif "call" in step:
            step = {"call": named(step["call"])}
        elif "calls" in step:
            step = {"calls": [named(call) for call in step["calls"]]}
        steps.append(step)
    return steps


def _children_of(script: list[dict[str, Any]]) -> list[str]:
    """The threads a script's calls name (a run's script: `_for_run` already applied)."""
    calls = [c for s in script for c in ([s["call"]] if "call" in s else s.get("calls", []))]
    return [call["thread"] for call in calls if "thread" in call]


@dataclass
class Delegation:
    """A demo submission that delegates to a subagent, and what was shown of it."""

    thread_id: str
    submission_id: str
    child_threads: list[str]
    waiting_shown: bool = False
    outcome_shown: bool = False


@dataclass
class AgentTurn:
    """The demo's agent submission (a pydantic-ai agent on an offline model), and whether
    its outcome was shown."""

    thread_id: str
    submission_id: str
    agent_id: str
    shown: bool = False


@dataclass
class Progress:
    """One look at the demo's threads and the messages they sent."""

    statuses: list[ThreadStatus]
    messages: list[Message]

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


Details = Callable[[dict[str, Any]], Awaitable[str]]
"""What a feed line adds to a record's kind (the tool a journal step names), looked up by
the record's thread and sequence: a notification carries no body."""


@dataclass
class DemoPrinter:
    """Prints each record published for this run's threads, as LISTEN/NOTIFY brings it: the
    same feed an application would follow, one short line per record. Lines are printed in the
    order the notifications came, by `show` (a task), so a line may add details read from the
    ledger (``tool-call model-request``: a model request an agent journaled)."""

    prefix: str
    details: Details
    seen: set[tuple[str, int]] = field(default_factory=set)
    queued: set[tuple[str, int]] = field(default_factory=set)
    pending: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)

    def on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        record = json.loads(str(payload))
        key = (record["thread_id"], record["sequence"])
        if not record["thread_id"].startswith(self.prefix) or key in self.queued:
            return  # another run's record, or an at-least-once repeat
        self.queued.add(key)
        self.pending.put_nowait(record)

    async def show(self) -> None:
        """Print the notified records one by one, for ever (cancelled on exit)."""
        while True:
            record = await self.pending.get()
            try:
                detail = await self.details(record)
            except Exception:  # a line without its details rather than no more lines
                detail = ""
            _line(
                f"  feed  {record['thread_id']:<21} #{record['sequence']:<3} {record['kind']}"
                + (f" {detail}" if detail else "")
            )
            self.seen.add((record["thread_id"], record["sequence"]))

    async def catch_up(self, client: ThreadwardenClient, threads: list[str]) -> int:
        """Wait (briefly) until every record of the threads was shown; return how many are
        still missing, so a slow publication shows up instead of being silently cut off."""
        expected = {
            (thread, record["sequence"])
            for thread in threads
            for record in await client.records(thread)
        }
        deadline = time.monotonic() + FEED_CATCH_UP_S
        while expected - self.seen and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return len(expected - self.seen)


def _tool_names(client: ThreadwardenClient) -> Details:
    """Details naming the tool of a ``tool-call`` or ``tool-result`` record (none for other
    kinds). A thread's records are read again only for a record not read yet."""
    tools: dict[tuple[str, int], str] = {}

    async def details(record: dict[str, Any]) -> str:
        if record["kind"] not in ("tool-call", "tool-result"):
            return ""
        key = (record["thread_id"], record["sequence"])
        if key not in tools:
            for read in await client.records(record["thread_id"]):
                body = read["body"]
                if isinstance(body, dict) and isinstance(body.get("tool"), str):
                    tools[(record["thread_id"], read["sequence"])] = body["tool"]
        return tools.get(key, "")

    return details


@contextlib.asynccontextmanager
async def _record_feed(
    database_url: str, prefix: str, details: Details
) -> AsyncIterator[DemoPrinter]:
    """Listen on a connection of its own (a pooled one would drop the LISTEN when released);
    closed on exit, before the stack stops."""
    feed = DemoPrinter(prefix, details)
    listener = await asyncpg.connect(database_url)
    shown = asyncio.create_task(feed.show())
    try:
        await listener.add_listener(NOTIFY_CHANNEL, feed.on_notify)
        yield feed
    finally:
        shown.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await shown
        await listener.close()


ServeApi = Callable[
    [Settings, str, Callable[[], Awaitable[Client]]], AbstractAsyncContextManager[str]
]
"""Serves the console and its HTTP API while the demo runs (`threadwarden.console.server`'s
``open_console``: the CLI hands it in, the worker room does not import the console)."""


async def run(settings: Settings, serve_api: ServeApi) -> int:
    """Start the stack, submit the scripts, show progress, print the summary, stop."""
    run_id = uuid.uuid4().hex[:6]
    demo_settings = settings.model_copy(update={"data_dir": settings.data_dir / "demo"})
    if "head_start_timeout_ms" not in settings.model_fields_set:
        # The translator is deployed mid-demo: its heads show their binding retry after 5 s,
        # not the production 60 s (THREADWARDEN_HEAD_START_TIMEOUT_MS still wins).
        demo_settings = demo_settings.model_copy(update={"head_start_timeout_ms": 5_000})
    # The demo narrates the translator's binding wait itself: the worker's own warning about
    # it would land in the middle of the progress lines (unless --verbose asked for logs).
    binding_log = logging.getLogger("threadwarden.activities.pass_steps")
    if binding_log.getEffectiveLevel() > logging.INFO:
        binding_log.setLevel(logging.ERROR)
    _line(f"Starting the embedded stack in {demo_settings.data_dir} …")
    # pydantic-ai takes a second or two to import: in a thread, while the servers start.
    agent = asyncio.ensure_future(asyncio.to_thread(_load_agent))
    with stopped_by_signals():  # SIGHUP/SIGTERM stop the stack too (see `dev`)
        try:
            async with embedded_stack(demo_settings.data_dir, record=False) as connections:
                _line(f"  Temporal {connections.temporal_address}, web UI {connections.ui_url}")
                progress = await _run_scripts(demo_settings, connections, run_id, agent, serve_api)
                _summary(progress)
                if not progress.succeeded():
                    print(
                        "demo: some submissions or messages did not settle in time",
                        file=sys.stderr,
                    )
                    return 1
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            print("demo: stopped by a signal; the stack is stopped", file=sys.stderr)
            return 1
    _line("Stack stopped. To browse these hosts in the Temporal UI, start it again with")
    _line(f"  {_this_command()} --data-dir {demo_settings.data_dir} dev")
    return 0


async def _run_scripts(
    settings: Settings,
    connections: Connections,
    run_id: str,
    loading: Awaitable[Binding | ImportError],
    serve_api: ServeApi,
) -> Progress:
    """Submit, follow the feed and the progress until everything settled. The feed closes
    first (it is entered last), so no feed line lands inside the summary."""
    on_any_port = settings.model_copy(update={"console_address": "127.0.0.1:0"})
    async with (
        contextlib.AsyncExitStack() as workers,
        ThreadwardenClient.connect(settings, connections) as client,
        serve_api(
            on_any_port,
            connections.database_url,
            lambda: connect_configured(settings, connections),
        ) as console_url,
        _record_feed(connections.database_url, _thread_id(run_id, ""), _tool_names(client)) as feed,
    ):
        api_url = f"{console_url}/v1"
        _line(f"  console {console_url}, HTTP API {api_url} (while the demo runs)")
        _line(f"Following the live record feed (LISTEN {NOTIFY_CHANNEL}) …")
        agent, graph = _agent_or_note(await loading), _load_graph()
        await workers.enter_async_context(
            running_worker(settings, connections, _registry(agent, graph))
        )
        threads, delegations, turn = await _submit_all(client, run_id, agent, api_url)
        graph_turn = None if graph is None else await _submit_graph(client, run_id, graph)
        if graph_turn is not None:
            threads.append(graph_turn.thread_id)
        _announce_totals(run_id, threads, delegations)

        async def deploy_translator() -> None:
            await workers.aclose()  # a rolling deploy: the old worker goes away first
            registry = _registry(agent, graph)
            registry.register(translator_binding())
            await workers.enter_async_context(running_worker(settings, connections, registry))

        progress = await _watch(client, threads, delegations, turn, deploy_translator)
        if graph_turn is not None:
            await _show_graph_turn(client, graph_turn)
        missing = await feed.catch_up(client, [s.thread_id for s in progress.statuses])
        late = f" ({missing} not published yet)" if missing else ""
        _line(f"  feed showed {len(feed.seen)} records{late}")
        return progress


def _load_agent() -> Binding | ImportError:
    """The demo's pydantic-ai agent (`demo_agent`), or why it cannot be imported."""
    try:
        from threadwarden.cli.demo_agent import concierge_binding
    except ImportError as missing:
        return missing
    return concierge_binding()


def _load_graph() -> Binding | None:
    """The demo's LangGraph graph (`demo_graph`), or None with a note when the ``langgraph``
    extra is not installed: the demo then runs without its graph thread."""
    try:
        from threadwarden.cli.demo_graph import tailor_binding
    except ImportError as missing:
        _line(
            f"  no graph thread: {missing.name or missing} is not installed"
            " (pip install 'threadwarden[langgraph]')"
        )
        return None
    return tailor_binding()


def _agent_or_note(loaded: Binding | ImportError) -> Binding | None:
    """The agent, or None with a note when the ``pydantic-ai`` extra is not installed: the
    demo then runs without its agent thread."""
    if isinstance(loaded, ImportError):
        _line(
            f"  no agent thread: {loaded.name or loaded} is not installed"
            " (pip install 'threadwarden[pydantic-ai]')"
        )
        return None
    return loaded


def _registry(*agents: Binding | None) -> BindingRegistry:
    """The built-in ``scripted`` binding, and the demo's agent and graph when there are."""
    registry = default_registry()
    for agent in agents:
        if agent is not None:
            registry.register(agent)
    return registry


async def _submit_all(
    client: ThreadwardenClient, run_id: str, agent: Binding | None, api_url: str
) -> tuple[list[str], list[Delegation], AgentTurn | None]:
    threads, delegations = [], []
    shared_host = _thread_id(run_id, "shared")
    for name, scripts in SCRIPTS.items():
        thread = _thread_id(run_id, name)
        host = shared_host if name in SHARED_HOST_THREADS else None
        for n, script in enumerate(scripts):
            steps = _for_run(script, run_id)
            receipt = await client.submit(
                thread,
                agent_id="scripted",
                input=steps,
                host_id=host,
                idempotency_key=f"{thread}-{n}",
            )
            if children := _children_of(steps):
                delegations.append(Delegation(thread, receipt.submission_id, children))
        threads.append(thread)
    i18n = _thread_id(run_id, "i18n")
    # As an application would: over the HTTP API (docs/api.md), as `curl` does.
    await asyncio.to_thread(
        _post_json,
        f"{api_url}/threads/{i18n}/submissions",
        {"agent": TRANSLATOR, "input": {"text": "hello"}},
        i18n,
    )
    _line(f"  {i18n}: admitted with POST {api_url}/threads/{i18n}/submissions")
    threads.append(i18n)
    turn = None
    if agent is not None:
        thread = _thread_id(run_id, agent.agent_id)
        receipt = await client.submit(
            thread, agent_id=agent.agent_id, input=AGENT_PROMPT, idempotency_key=thread
        )
        turn = AgentTurn(thread, receipt.submission_id, agent.agent_id)
        threads.append(thread)
    return threads, delegations, turn


def _post_json(url: str, body: Any, idempotency_key: str) -> Any:
    """POST ``body`` as JSON (blocking: run it in a thread); the answer's JSON."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "idempotency-key": idempotency_key},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def _this_command() -> str:
    """How to run ``threadwarden`` again from here: the path this process was started as (the
    venv's script under ``make demo``), so the hint works without an activated venv."""
    started = Path(sys.argv[0])
    if started.name == "threadwarden" and started.exists():
        return shlex.quote(os.path.relpath(started))
    return "threadwarden"


def _announce_totals(run_id: str, threads: list[str], delegations: list[Delegation]) -> None:
    """One line with the counts the progress and the summary will show: what was submitted,
    and the submissions its messages and subagent calls add, each on a thread of its own."""
    submitted = sum(len(s) for s in SCRIPTS.values()) + len(threads) - len(SCRIPTS)
    sends = sum(1 for script in SCRIPTS.values() for steps in script for s in steps if "send" in s)
    children = sum(len(d.child_threads) for d in delegations)
    added = sends + children
    _line(
        f"Submitted {submitted} submissions on {len(threads)} threads (run {run_id}); a message"
        f" between threads and a subagent call add {added} on {added} threads of their own:"
        f" {submitted + added} submissions on {len(threads) + added} threads in all."
    )


async def _submit_graph(client: ThreadwardenClient, run_id: str, graph: Binding) -> AgentTurn:
    thread = _thread_id(run_id, graph.agent_id)
    receipt = await client.submit(
        thread, agent_id=graph.agent_id, input={"item": "jacket"}, idempotency_key=thread
    )
    return AgentTurn(thread, receipt.submission_id, graph.agent_id)


async def _show_graph_turn(client: ThreadwardenClient, turn: AgentTurn) -> None:
    """One line: the graph's outcome and its final state, with the nodes that ran."""
    settled = await client.result(turn.submission_id, timeout=5)
    nodes = [
        r["body"]["node"]
        for r in await client.records(turn.thread_id)
        if r["kind"] == "graph-update" and r["submission_id"] == turn.submission_id
    ]
    shown = json.dumps(settled.result) if settled.outcome == "completed" else settled.reason
    _line(
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
    _line(f"  {sub.submission_id} asks {question}: answering {json.dumps(GRAPH_ANSWER)}")
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
            _line(
                f"  message {message.message_id} {route} delivered to"
                f" {message.destination_thread_id} as {message.destination_submission_id}"
            )
        else:
            _line(f"  message {message.message_id} {route} {message.state}: {message.last_error}")


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
                _line(
                    f"  {parent.submission_id} on {delegation.thread_id} delegated to a subagent"
                    f" ({children}) and waits for it, holding no claim"
                )
                delegation.waiting_shown = True
        if parent.state == "settled" and not delegation.outcome_shown:
            settled = await client.result(parent.submission_id, timeout=5)
            result = settled.result if isinstance(settled.result, dict) else {}
            for child in result.get("children", []):
                _line(
                    f"  {parent.submission_id} {settled.outcome} with its subagent's result:"
                    f" {child['submission_id']} on {child['thread']} {child['outcome']},"
                    f" {json.dumps(child['result'])}"
                )
            if not result.get("children"):
                _line(f"  {parent.submission_id} {settled.outcome}: {settled.reason}")
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
    _line(
        f"  {turn.submission_id} on {turn.thread_id}: pydantic-ai agent {turn.agent_id!r}"
        f" {settled.outcome} after {tools.count(MODEL_REQUEST)} model requests and the tools"
        f" {others or 'none'}: {answer}"
    )
    turn.shown = True


async def _watch(
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
            _line(f"{line}  ({time.monotonic() - started:4.1f}s)")
            last = line
        for sub in waiting:
            if sub.waiting_for == "approval":
                _line(f"  {sub.submission_id} waits for an approval: approving it")
                await client.approve(sub.submission_id)
            elif sub.waiting_for == "input":
                await _answer_question(client, thread_of[sub.submission_id], sub)
        blocked = [s for s in waiting if s.waiting_for == "binding"]
        if not deployed and blocked and done + len(blocked) == len(subs):
            _line(
                f"  {blocked[0].submission_id} waits for a binding of agent"
                f" {blocked[0].agent_id!r} (durable retry 5, 10, 20 … s): deploying a worker"
                " that has it"
            )
            await deploy_translator()
            deployed = True
        if progress.done() or time.monotonic() - started > SETTLE_TIMEOUT_S:
            return progress
        await asyncio.sleep(0.25)


def _summary(progress: Progress) -> None:
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
    _line("")
    _line(
        format_table(
            ["thread", "agent", "host", "subs", "completed", "failed", "failure reasons"], rows
        )
    )
    _line("")
