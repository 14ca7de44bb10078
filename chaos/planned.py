"""One planned submission of the chaos workload (`chaos.workload` draws them) and exactly what
it must leave in the ledger: its outcome, its settlement's result (or reason) and its canonical
records, in order.

A child (planned inside its parent: `Planned.children`) starts with its ``lineage``; a
delegating parent records each of its calls' ``call-started``, the optional
``children-awaited`` and each one's ``call-joined``, and its result lists its children; a long
send records its ``message-sent``. These name submission ids (and a message's id) only the
ledger knows: `Planned.records` and `Planned.settlement` take them as `Ids`, which the check
reads from the rows. A framework agent's turn (`chaos.agents`) is two model requests around one
``lookup`` call, then its conversation record; the check compares its `agent_view`s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from threadwarden.ledger.admission import payload_digest
from threadwarden.ledger.messages import message_id_for

AGENT = "scripted"
TOOL = "lookup"
OPTIONAL_KINDS = frozenset({"children-awaited"})
"""Record kinds a script may or may not leave: a parent whose children all settled before it
suspended goes on without waiting (and without the record)."""
PYDANTIC_AI = "chaos-pydantic-ai"
OPENAI_AGENTS = "chaos-openai-agents"
"""The framework agents of `chaos.agents` (imported only by the workers)."""
CONVERSATION_KINDS = {PYDANTIC_AI: "pydantic-ai-messages", OPENAI_AGENTS: "openai-agents-items"}
"""The record a framework agent's completed turn appends before its settlement."""
MODEL_STEP = "model-request"
AGENT_TOOL = "lookup"
UNKNOWN = "?"
"""Stands for an id the ledger does not hold (so the expectation cannot match)."""

Record = tuple[str, Any]
"""(kind, body) of one canonical record."""


@dataclass(frozen=True)
class Linked:
    """A submission as the ledger holds it, named by another's records or result."""

    submission_id: str
    thread_id: str
    host_id: str
    settlement_record_id: str | None = None


MISSING = Linked(UNKNOWN, UNKNOWN, UNKNOWN)


@dataclass(frozen=True)
class Ids:
    """What only the ledger knows about a submission's delegations."""

    submission_id: str = UNKNOWN
    """Its own."""
    children: Mapping[int, Linked] = field(default_factory=dict)
    """Its children, by call step."""
    parent: Linked = MISSING
    """A child's parent."""

    def child(self, step: int | None) -> Linked:
        return self.children.get(step, MISSING) if step is not None else MISSING


@dataclass(frozen=True)
class Planned:
    """One submission of the workload: where it goes and the script it runs.

    A child has ``parent`` (its parent's key) and ``call_step`` (the parent's journal step of
    the call); its ``thread`` is None when threadwarden derives it, its ``host`` None when it
    is its thread's own."""

    key: str
    thread: str | None
    host: str | None
    n: int
    """Its place in its thread's order of submission (0 first)."""
    steps: list[dict[str, Any]]
    children: tuple[Planned, ...] = ()
    """The children its calls delegate to, in call (journal step) order."""
    parent: str | None = None
    call_step: int | None = None
    group: int = 0
    """Which of its parent's delegating steps (0 first) delegates to it."""
    agent: str = AGENT
    """``scripted`` (the script is ``steps``), or a framework agent of `chaos.agents` (its
    turn is ``{"prompt": key}``, ``steps`` empty)."""
    messages: tuple[Planned, ...] = ()
    """The messages its ``send`` steps admit on other threads, in send order."""
    sender: str | None = None
    """A message's sender (its key); the message's ``n`` says nothing of its place on its
    thread, where deliveries admit it whenever they run."""
    send_step: int | None = None
    """A message's journal step in its sender's script (the message id derives from it)."""

    @property
    def framework(self) -> bool:
        return self.agent != AGENT

    @property
    def input(self) -> Any:
        """What is submitted."""
        return {"prompt": self.key} if self.framework else self.steps

    @property
    def outcome(self) -> str:
        return "failed" if any("fail" in step for step in self.steps) else "completed"

    @property
    def send(self) -> dict[str, Any]:
        """A message's ``send`` object, as its sender's script holds it."""
        send: dict[str, Any] = {"thread": self.thread, "input": self.steps}
        if self.host is not None:
            send["host"] = self.host
        return send

    @property
    def call(self) -> dict[str, Any]:
        """A child's ``call`` object, as its parent's script holds it."""
        call: dict[str, Any] = {"input": self.steps}
        if self.thread is not None:
            call["thread"] = self.thread
        if self.host is not None:
            call["host"] = self.host
        return call

    def settlement(self, ids: Ids | None = None) -> dict[str, Any]:
        """The body of the one settlement record the script must end with (a delegating
        parent's result lists its children, named by ``ids``)."""
        if self.framework:
            return {"outcome": "completed", "result": answer(self.key), "reason": None}
        said: list[str] = []
        for step in self.steps:
            if "fail" in step:
                return {"outcome": "failed", "result": None, "reason": step["fail"]}
            if "say" in step:
                said.append(step["say"])
        if not self.children:
            return {"outcome": "completed", "result": {"said": said}, "reason": None}
        ids = ids or Ids()
        children = [
            {
                "thread": ids.child(child.call_step).thread_id,
                "submission_id": ids.child(child.call_step).submission_id,
                "outcome": child.outcome,
                "result": child.settlement()["result"],
            }
            for child in self.children
        ]
        result = {"said": said, "children": children}
        return {"outcome": "completed", "result": result, "reason": None}

    def records(self, ids: Ids | None = None) -> list[Record]:
        """The canonical records the script writes before its settlement, in order (those of
        `OPTIONAL_KINDS` may be missing); a child's first is its ``lineage``. A framework
        agent's are `agent_view`s."""
        if self.framework:
            return _agent_turn(self.key, self.agent)
        ids = ids or Ids()
        written: list[Record] = []
        if self.parent is not None:
            written.append(("lineage", self._lineage(ids)))
        groups: dict[int, list[Planned]] = {}
        for child in self.children:
            groups.setdefault(child.group, []).append(child)
        messages = iter(self.messages)
        for step in self.steps:
            if "fail" in step:
                break
            if "say" in step:
                written.append(("message", {"text": step["say"]}))
            elif "tool" in step:
                call = {"tool": TOOL, "args": step["args"], "side_effect": False}
                written.append(("tool-call", {**call, "idempotency_key": None}))
                result = {"ok": True, "echo": step["args"]}
                written.append(("tool-result", {"tool": TOOL, "result": result}))
            elif "call" in step or "calls" in step:
                written.extend(self._delegation(groups.pop(min(groups)), ids))
            elif "send" in step:
                written.append(("message-sent", _sent(next(messages), ids)))
        return written

    def _delegation(self, children: list[Planned], ids: Ids) -> list[Record]:
        """A call (or calls) step's records: each child's ``call-started``, the optional
        ``children-awaited`` listing them, then each one's ``call-joined``."""
        linked = [(child, ids.child(child.call_step)) for child in children]
        started = [("call-started", self._started(c, link, ids)) for c, link in linked]
        awaited = ("children-awaited", {"children": [link.submission_id for _, link in linked]})
        joined = [("call-joined", _joined(c, link)) for c, link in linked]
        return [*started, awaited, *joined]

    def _started(self, child: Planned, link: Linked, ids: Ids) -> dict[str, Any]:
        return {
            "child_thread_id": link.thread_id,
            "child_submission_id": link.submission_id,
            "child_host_id": link.host_id,
            "agent_id": AGENT,
            "idempotency_key": f"child:{ids.submission_id}:{child.call_step}",
            "payload_digest": payload_digest(AGENT, None, child.steps),
            "budget": None,  # no call of the workload reserves one
        }

    def _lineage(self, ids: Ids) -> dict[str, Any]:
        return {
            "parent_thread_id": ids.parent.thread_id,
            "parent_submission_id": ids.parent.submission_id,
            "parent_host_id": ids.parent.host_id,
            "parent_call_step": self.call_step,
            "agent_id": AGENT,
            "payload_digest": payload_digest(AGENT, None, self.steps),
            "depth": 1,
            "budget": None,
        }


def _sent(message: Planned, ids: Ids) -> dict[str, Any]:
    """The body of the ``message-sent`` record of ``message``'s send (``ids`` its sender's)."""
    return {
        "message_id": message_of(ids.submission_id, message),
        "to_thread": message.thread,
        "to_host": message.host,
        "agent_id": AGENT,
        "input": message.steps,
    }


def message_of(sender_submission_id: str, message: Planned) -> str:
    """The id of ``message`` as sent by submission ``sender_submission_id``."""
    assert message.send_step is not None
    return message_id_for(sender_submission_id, message.send_step)


def _joined(child: Planned, link: Linked) -> dict[str, Any]:
    settlement = child.settlement()
    return {
        "submission_id": link.submission_id,
        "thread_id": link.thread_id,
        "outcome": settlement["outcome"],
        "result": settlement["result"],
        "reason": settlement["reason"],
        "settlement_record_id": link.settlement_record_id,
        "budget": None,
    }


def looked_up(key: str) -> str:
    """What a framework agent's ``lookup`` tool returns for ``key``."""
    return f"found {key}"


def answer(key: str) -> str:
    """A framework agent's final text for turn ``key`` (its settlement's ``result``)."""
    return f"answer for {key}: {looked_up(key)}"


def agent_view(record: Record) -> Record:
    """What the check compares of a framework agent's record: its kind, the tool of a
    journal step and, for ``lookup``, its arguments and result (a model step's request and
    response bodies are the framework's own JSON)."""
    kind, body = record
    if kind in ("tool-call", "tool-result") and isinstance(body, dict):
        tool = body.get("tool")
        if tool == AGENT_TOOL:
            shown = {k: body.get(k) for k in ("args", "side_effect", "result") if k in body}
            return kind, {"tool": tool, **shown}
        return kind, {"tool": tool}
    return kind, None


def _agent_turn(key: str, agent: str) -> list[Record]:
    model = [("tool-call", {"tool": MODEL_STEP}), ("tool-result", {"tool": MODEL_STEP})]
    return [
        *model,
        ("tool-call", {"tool": AGENT_TOOL, "args": {"key": key}, "side_effect": False}),
        ("tool-result", {"tool": AGENT_TOOL, "result": looked_up(key)}),
        *model,
        (CONVERSATION_KINDS[agent], None),
    ]


def all_planned(planned: list[Planned]) -> list[Planned]:
    """The submissions, their children and the messages they send."""
    children = [child for plan in planned for child in plan.children]
    messages = [message for plan in planned for message in plan.messages]
    return [*planned, *children, *messages]
