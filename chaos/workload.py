"""The chaos workload: seeded scripts for the built-in ``scripted`` agent, and what each must leave.

Submission ``n`` of thread ``t`` has the key ``t.n``: its idempotency key and the text of its
first ``say`` step, so the ledger check recognises a submission by its input whatever key it was
admitted under. A script sleeps, calls an ordinary tool (no side effect: a re-run may call it
again, it is never ``unknown``) and says things; some scripts end with ``fail``, the only
submissions that may settle ``failed``. Every script dictates its outcome, its result (or
reason) and the exact canonical records it leaves, in order.

Some scripts delegate to scripted children (a ``call`` step, a ``calls`` step of two awaited
together, or both), each child on a thread of its own: child ``j`` of ``t.n`` has the key
``t.n.cj`` (the text of its first ``say``). A ``call``'s child names its thread (its key) and
sometimes a host (its parent's, or another thread's); the children of a ``calls`` take the
thread threadwarden derives. Children are admitted by threadwarden's establishment, never by the
run, so they are planned inside their parent (`Planned.children`) and counted apart. A child
that fails on purpose settles ``failed`` and its parent goes on. What a delegation records and
returns names submission ids only the ledger knows: `Planned.records` and `Planned.settlement`
take them as `Ids`.

With a ``long_send_share`` (`plan_workload`), that share of the scripted submissions run a long
send instead of their seeded script: they say their key, ``send`` a message to another scripted
thread of the run (on that thread's host) and then sleep `LONG_SLEEP_MS`, so that a deploy lands
while a delivery and a long head are in flight. The message (``[{"say": "t.n.m0"}]``) is
admitted on its destination thread by threadwarden's delivery, never by the run: it is planned
inside its sender (`Planned.messages`), counted apart and checked like every submission, its
sender's ``message-sent`` record naming the message id only the ledger's ids give.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from threadwarden.ledger.admission import payload_digest
from threadwarden.ledger.messages import message_id_for

AGENT = "scripted"
TOOL = "lookup"
SLEEPS_MS = (0, 10, 50, 100, 300, 1_000, 2_000)
SLEEP_WEIGHTS = (3, 3, 3, 3, 2, 1, 1)
FAIL_RATIO = 0.1
"""Share of scripts that fail on purpose."""
DELEGATIONS = (("call",), ("calls",), ("call", "calls"))
DELEGATION_RATIOS = (0.08, 0.04, 0.02)
"""Shares of scripts that make one ``call``, a ``calls`` of two, or a ``call`` then a
``calls`` of two."""
CHILD_FAIL_RATIO = 0.2
"""Share of children that fail on purpose."""
LONG_SLEEP_MS = 10_000
"""How long a long send's head sleeps after its ``send`` step."""
OPTIONAL_KINDS = frozenset({"children-awaited"})
"""Record kinds a script may or may not leave: a parent whose children all settled before it
suspended goes on without waiting (and without the record)."""
PYDANTIC_AI = "chaos-pydantic-ai"
OPENAI_AGENTS = "chaos-openai-agents"
"""The framework agents of `chaos.agents` (imported only by the workers)."""
AGENT_EVERY = 5
"""Every fifth thread's turns go to a framework agent (`chaos.agents`)."""
FRAMEWORKS = (PYDANTIC_AI, OPENAI_AGENTS)
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


def thread_name(index: int) -> str:
    return f"chaos-t{index:03d}"


def host_name(index: int) -> str:
    """Threads 4k and 4k+1 share one host (two lanes); every other thread has its own."""
    pair = index // 2
    return f"chaos-h{pair:03d}" if pair % 2 == 0 else f"chaos-h{pair:03d}-{index % 2}"


def plan_workload(
    submissions: int, threads: int, seed: int, *, long_send_share: float = 0.0
) -> list[Planned]:
    """``submissions`` spread round-robin over ``threads``, each with its seeded script (and
    its children, inside it); every `AGENT_EVERY`th thread's turns go to a framework agent
    instead (the two frameworks by turns). A seeded ``long_send_share`` of the scripted ones
    (when another scripted thread exists) run a long send instead (`_long_send`)."""
    planned = []
    scripted = [index for index in range(threads) if not _framework(index)]
    for number in range(submissions):
        index, n = number % threads, number // threads
        thread = thread_name(index)
        key = f"{thread}.{n}"
        host = host_name(index)
        if _framework(index):
            agent = FRAMEWORKS[(index // AGENT_EVERY) % len(FRAMEWORKS)]
            planned.append(Planned(key, thread, host, n, [], agent=agent))
            continue
        sending = random.Random(f"{seed}/{key}/send")
        others = [other for other in scripted if other != index]
        if long_send_share > 0 and others and sending.random() < long_send_share:
            planned.append(_long_send(key, thread, host, n, sending.choice(others)))
            continue
        steps = _script(key, random.Random(f"{seed}/{key}"))
        delegating = random.Random(f"{seed}/{key}/calls")
        steps, children = _delegate(key, host, steps, delegating, threads)
        planned.append(Planned(key, thread, host, n, steps, children))
    return planned


def all_planned(planned: list[Planned]) -> list[Planned]:
    """The submissions, their children and the messages they send."""
    children = [child for plan in planned for child in plan.children]
    messages = [message for plan in planned for message in plan.messages]
    return [*planned, *children, *messages]


def _framework(index: int) -> bool:
    return index % AGENT_EVERY == AGENT_EVERY - 1


def _long_send(key: str, thread: str, host: str, n: int, to: int) -> Planned:
    """Submission ``key`` as a long send to workload thread ``to`` (on its host, which the
    thread may not have yet when the message arrives): say the key, send the message (journal
    step 2), sleep `LONG_SLEEP_MS`."""
    message_key = f"{key}.m0"
    message = Planned(
        message_key,
        thread_name(to),
        host_name(to),
        0,
        [{"say": message_key}],
        sender=key,
        send_step=2,
    )
    steps: list[dict[str, Any]] = [
        {"say": key},
        {"send": message.send},
        {"sleep_ms": LONG_SLEEP_MS},
    ]
    return Planned(key, thread, host, n, steps, messages=(message,))


def _script(key: str, rng: random.Random) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [{"say": key}]
    for k in range(rng.randint(0, 3)):
        kind = rng.choice(("sleep", "tool", "say"))
        if kind == "sleep":
            steps.append({"sleep_ms": rng.choices(SLEEPS_MS, SLEEP_WEIGHTS)[0]})
        elif kind == "tool":
            steps.append({"tool": TOOL, "args": {"key": key, "k": k}})
        else:
            steps.append({"say": f"{key} says {k}"})
    if rng.random() < FAIL_RATIO:
        steps.append({"fail": f"{key} fails on purpose"})
        steps.append({"say": f"{key} must never say this"})
    return steps


def _delegate(
    key: str, host: str, steps: list[dict[str, Any]], rng: random.Random, threads: int
) -> tuple[list[dict[str, Any]], tuple[Planned, ...]]:
    """Insert the seeded delegating steps before a script's ``fail`` (if any): the script
    and its children."""
    draw = rng.random()
    kinds: tuple[str, ...] = ()
    for delegation, ratio in zip(DELEGATIONS, DELEGATION_RATIOS, strict=True):
        if draw < ratio:
            kinds = delegation
            break
        draw -= ratio
    if not kinds:
        return steps, ()
    end = next((i for i, step in enumerate(steps) if "fail" in step), len(steps))
    head, tail = steps[:end], steps[end:]
    journal = sum(1 for step in head if "sleep_ms" not in step)  # one step per context op
    parent = (key, host)
    children: list[Planned] = []
    for group, kind in enumerate(kinds):
        if kind == "call":
            journal += 1
            child = _child(parent, len(children), journal, group, rng, threads, named=True)
            children.append(child)
            head.append({"call": child.call})
        else:
            pair = []
            for _ in range(2):
                journal += 1
                pair.append(_child(parent, len(children), journal, group, rng, threads))
                children.append(pair[-1])
            head.append({"calls": [child.call for child in pair]})
    return [*head, *tail], tuple(children)


def _child(
    parent: tuple[str, str],
    j: int,
    step: int,
    group: int,
    rng: random.Random,
    threads: int,
    *,
    named: bool = False,
) -> Planned:
    """Child ``j`` of ``parent`` (its key and host) at the parent's journal ``step``; a named
    one has its own thread (its key) and, a third of the time each, its parent's host or the
    host of a seeded workload thread."""
    key = f"{parent[0]}.c{j}"
    steps: list[dict[str, Any]] = [{"say": key}]
    extra = rng.choice(("none", "say", "tool", "sleep"))
    if extra == "say":
        steps.append({"say": f"{key} says 0"})
    elif extra == "tool":
        steps.append({"tool": TOOL, "args": {"key": key, "k": 0}})
    elif extra == "sleep":
        steps.append({"sleep_ms": rng.choice(SLEEPS_MS[:5])})
    if rng.random() < CHILD_FAIL_RATIO:
        steps.append({"fail": f"{key} fails on purpose"})
    host = None
    if named:
        where = rng.choice(("own", "parent", "other"))
        if where == "parent":
            host = parent[1]
        elif where == "other":
            host = host_name(rng.randrange(threads))
    return Planned(
        key,
        key if named else None,
        host,
        0,
        steps,
        parent=parent[0],
        call_step=step,
        group=group,
    )
