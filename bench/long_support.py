"""The offline model and the pydantic-ai agent of the long-thread shape (``python -m bench --shape
long-thread``, issue 37 item 6).

The model is a plain function of the request, the same on every side: a turn's answer is
`ANSWER_CHARS` characters drawn from a seed of the turn's prompt, so every turn adds ~1 KB of
conversation and PostgreSQL's compression cannot fold one turn's text into another's (a repeated
text would make a rewritten history look cheap). A request whose instructions ask for a summary
(threadwarden's memory compacting the thread) gets `SUMMARY_CHARS` characters. pydantic-ai runs it
as a `FunctionModel`; the LangGraph side wraps the same `answer` in a LangChain chat model
(bench/long_graph.py).

Worker processes load ``bench.long_support:bindings``; ``BENCH_MEMORY_BUDGET`` (tokens) sets the
memory budget of the binding (`binding`, ``threadwarden.Memory``).
"""

from __future__ import annotations

import hashlib
import os
import random
import string
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import threadwarden
from threadwarden.agents import pydantic_ai
from threadwarden.bindings import Binding

AGENT = "bench-long-thread"
INSTRUCTIONS = "Answer the user in detail."
"""The agent's own instructions (a request with other instructions naming a summary is one)."""
ANSWER_CHARS = 1000
"""A turn's answer: with the prompt, each turn adds ~1 KB to the conversation."""
SUMMARY_CHARS = 300
BUDGET_TOKENS = 4000
"""The threadwarden side's memory budget: ~15 turns of ~260 tokens (4 characters each)."""
KEEP_TURNS = 4
BUDGET_ENV = "BENCH_MEMORY_BUDGET"
WARM_UP = "warm up"
"""The user turn of each side's warm-up (another thread, not measured)."""
_LETTERS = string.ascii_lowercase


def prompt(turn: int) -> str:
    """The user's message of ``turn`` (the same on every side)."""
    return f"turn {turn}: tell me more about part {turn} of the plan"


def _text(seed: str, size: int) -> str:
    """``size`` characters of words drawn from ``seed`` (deterministic, barely compressible)."""
    draw = random.Random(hashlib.sha256(seed.encode()).digest())
    words: list[str] = []
    length = 0
    while length <= size:  # the joined text is length - 1 characters
        word = "".join(draw.choices(_LETTERS, k=draw.randint(2, 9)))
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def answer(user_message: str, *, summary: bool = False) -> str:
    """The model's answer to a request whose last user message is ``user_message``."""
    if summary:
        return _text(f"summary of {user_message}", SUMMARY_CHARS)
    return _text(user_message, ANSWER_CHARS)


def asks_for_summary(instructions: str) -> bool:
    """Whether a request with ``instructions`` is a summary request: instructions that are not
    the agent's own and name a summary (threadwarden's compaction writes its own)."""
    return INSTRUCTIONS not in instructions and "summar" in instructions.lower()


def _last_user_text(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if not isinstance(message, ModelRequest):
            continue
        for part in reversed(message.parts):
            if isinstance(part, UserPromptPart):
                return part.content if isinstance(part.content, str) else str(part.content)
    return ""


def _instructions(messages: list[ModelMessage], info: AgentInfo) -> str:
    """The request's instructions and the system prompts of its first message (where both
    pydantic-ai and the adapter's summary request put them): the rest is not read, so the
    model's own cost does not grow with a history carried whole."""
    texts = [info.instructions or ""]
    first = messages[0] if messages else None
    if isinstance(first, ModelRequest):
        texts += [p.content for p in first.parts if isinstance(p, SystemPromptPart)]
    return "\n".join(texts)


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The offline model, as pydantic-ai's `FunctionModel` calls it."""
    summary = asks_for_summary(_instructions(messages, info))
    return ModelResponse(parts=[TextPart(answer(_last_user_text(messages), summary=summary))])


def long_thread_agent() -> Agent[None, str]:
    """The measured agent: one model request per turn, no tools."""
    model = FunctionModel(respond, model_name="bench-offline")
    return Agent(model, name=AGENT, instructions=INSTRUCTIONS)


def binding(budget_tokens: int | None) -> Binding:
    """The agent's binding, with a memory of ``budget_tokens`` (None: no budget)."""
    memory = threadwarden.Memory(budget_tokens=budget_tokens, keep_turns=KEEP_TURNS)
    return pydantic_ai.agent_binding(long_thread_agent(), memory=memory)


def __getattr__(name: str) -> Any:
    if name == "bindings":
        budget = os.environ.get(BUDGET_ENV)
        bindings: list[Binding] = [binding(int(budget) if budget else None)]
        return bindings
    raise AttributeError(name)
