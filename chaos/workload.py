"""The chaos workload: seeded scripts for the built-in ``scripted`` agent, drawn per thread.

Submission ``n`` of thread ``t`` has the key ``t.n``: its idempotency key and the text of its
first ``say`` step, so the ledger check recognises a submission by its input whatever key it was
admitted under. A script sleeps, calls an ordinary tool (no side effect: a re-run may call it
again, it is never ``unknown``) and says things; some scripts end with ``fail``, the only
submissions that may settle ``failed``. Every script dictates its outcome, its result (or
reason) and the exact canonical records it leaves, in order (`chaos.planned`).

Some scripts delegate to scripted children (a ``call`` step, a ``calls`` step of two awaited
together, or both), each child on a thread of its own: child ``j`` of ``t.n`` has the key
``t.n.cj`` (the text of its first ``say``). A ``call``'s child names its thread (its key) and
sometimes a host (its parent's, or another thread's); the children of a ``calls`` take the
thread threadwarden derives. Children are admitted by threadwarden's establishment, never by the
run, so they are planned inside their parent (`Planned.children`) and counted apart. A child
that fails on purpose settles ``failed`` and its parent goes on.

With a ``long_send_share`` (`plan_workload`), that share of the scripted submissions run a long
send instead of their seeded script: they say their key, ``send`` a message to another scripted
thread of the run (on that thread's host) and then sleep `LONG_SLEEP_MS`, so that a deploy lands
while a delivery and a long head are in flight. The message (``[{"say": "t.n.m0"}]``) is
admitted on its destination thread by threadwarden's delivery, never by the run: it is planned
inside its sender (`Planned.messages`), counted apart and checked like every submission, its
sender's ``message-sent`` record naming the message id only the ledger's ids give.

Every `AGENT_EVERY`th thread's turns go to a framework agent of `chaos.agents` instead.
"""

from __future__ import annotations

import random
from typing import Any

from chaos.planned import OPENAI_AGENTS, PYDANTIC_AI, TOOL, Planned

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
AGENT_EVERY = 5
"""Every fifth thread's turns go to a framework agent (`chaos.agents`)."""
FRAMEWORKS = (PYDANTIC_AI, OPENAI_AGENTS)


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
