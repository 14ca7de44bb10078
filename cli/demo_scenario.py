"""What ``threadwarden demo`` submits: the scripted threads, the agent's and the graph's turns,
the translator deployed late, and how each is submitted for one run."""

import asyncio
import json
import urllib.request
from dataclasses import dataclass
from typing import Any

from threadwarden.bindings import AttemptContext, Binding, BindingRegistry, Completed, Outcome
from threadwarden.cli.output import print_line
from threadwarden.client.client import ThreadwardenClient
from threadwarden.worker.plugin import default_registry

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
        [
            {
                # Live text, about 4 s of it: longer than the inline budget, so it never
                # starts inline (it runs once, on the agent's queue) and never starts over.
                "stream": "Daily digest: three releases shipped, two incidents closed, one"
                " outage resolved, fourteen pull requests merged, and the beta is on track"
                " for Friday with no open blockers left. Tomorrow the team reviews the"
                " migration plan, the docs sprint starts, and on-call rotates to the EU shift.",
                "chunk_ms": 100,
            },
            {"say": "Daily digest ready."},
        ],
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


def demo_thread(run_id: str, name: str) -> str:
    """The id of the thread ``name`` in the run ``run_id`` (``demo-RUN-NAME``)."""
    return f"demo-{run_id}-{name}"


def _for_run(script: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """Point the script's ``send`` and ``call`` steps at this run's threads, so runs never mix."""

    def named(target: dict[str, Any]) -> dict[str, Any]:
        if "thread" not in target:
            return target
        return {**target, "thread": demo_thread(run_id, target["thread"])}

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


def load_agent() -> Binding | ImportError:
    """The demo's pydantic-ai agent (`demo_agent`), or why it cannot be imported."""
    try:
        from threadwarden.cli.demo_agent import concierge_binding
    except ImportError as missing:
        return missing
    return concierge_binding()


def load_graph() -> Binding | None:
    """The demo's LangGraph graph (`demo_graph`), or None with a note when the ``langgraph``
    extra is not installed: the demo then runs without its graph thread."""
    try:
        from threadwarden.cli.demo_graph import tailor_binding
    except ImportError as missing:
        print_line(
            f"  no graph thread: {missing.name or missing} is not installed"
            " (pip install 'threadwarden[langgraph]')"
        )
        return None
    return tailor_binding()


def agent_or_note(loaded: Binding | ImportError) -> Binding | None:
    """The agent, or None with a note when the ``pydantic-ai`` extra is not installed: the
    demo then runs without its agent thread."""
    if isinstance(loaded, ImportError):
        print_line(
            f"  no agent thread: {loaded.name or loaded} is not installed"
            " (pip install 'threadwarden[pydantic-ai]')"
        )
        return None
    return loaded


def demo_registry(*agents: Binding | None) -> BindingRegistry:
    """The built-in ``scripted`` binding, and the demo's agent and graph when there are."""
    registry = default_registry()
    for agent in agents:
        if agent is not None:
            registry.register(agent)
    return registry


async def submit_all(
    client: ThreadwardenClient, run_id: str, agent: Binding | None, api_url: str
) -> tuple[list[str], list[Delegation], AgentTurn | None]:
    """Submit the scripts, the translator's turn (over the HTTP API at ``api_url``) and the
    agent's; return the threads, the delegating submissions and the agent's turn."""
    threads, delegations = [], []
    shared_host = demo_thread(run_id, "shared")
    for name, scripts in SCRIPTS.items():
        thread = demo_thread(run_id, name)
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
    i18n = demo_thread(run_id, "i18n")
    # As an application would: over the HTTP API (docs/api.md), as `curl` does.
    await asyncio.to_thread(
        _post_json,
        f"{api_url}/threads/{i18n}/submissions",
        {"agent": TRANSLATOR, "input": {"text": "hello"}},
        i18n,
    )
    print_line(f"  {i18n}: admitted with POST {api_url}/threads/{i18n}/submissions")
    threads.append(i18n)
    turn = None
    if agent is not None:
        thread = demo_thread(run_id, agent.agent_id)
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


def announce_totals(run_id: str, threads: list[str], delegations: list[Delegation]) -> None:
    """One line with the counts the progress and the summary will show: what was submitted,
    and the submissions its messages and subagent calls add, each on a thread of its own."""
    submitted = sum(len(s) for s in SCRIPTS.values()) + len(threads) - len(SCRIPTS)
    sends = sum(1 for script in SCRIPTS.values() for steps in script for s in steps if "send" in s)
    children = sum(len(d.child_threads) for d in delegations)
    added = sends + children
    print_line(
        f"Submitted {submitted} submissions on {len(threads)} threads (run {run_id}); a message"
        f" between threads and a subagent call add {added} on {added} threads of their own:"
        f" {submitted + added} submissions on {len(threads) + added} threads in all."
    )


async def submit_graph(client: ThreadwardenClient, run_id: str, graph: Binding) -> AgentTurn:
    """Submit the graph's turn: it reserves a jacket and asks which size."""
    thread = demo_thread(run_id, graph.agent_id)
    receipt = await client.submit(
        thread, agent_id=graph.agent_id, input={"item": "jacket"}, idempotency_key=thread
    )
    return AgentTurn(thread, receipt.submission_id, graph.agent_id)
