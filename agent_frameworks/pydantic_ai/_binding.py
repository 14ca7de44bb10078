"""`agent_binding`: a pydantic-ai `Agent` run as a threadwarden binding."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent, AgentRunResult, DeferredToolRequests
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.models import Model, infer_model
from pydantic_ai.tool_manager import ToolManager
from pydantic_ai.usage import UsageLimits
from pydantic_core import to_jsonable_python

from threadwarden.agents._core.compaction import Compactor, HeldMemory, remember
from threadwarden.agents._core.definition import digest, memory_definition
from threadwarden.agents._core.delegation import attempt
from threadwarden.agents._core.errors import judged
from threadwarden.agents._core.steps import user_prompt
from threadwarden.agents.pydantic_ai._approvals import Decide, deferred_handler
from threadwarden.agents.pydantic_ai._definition import read_definition
from threadwarden.agents.pydantic_ai._errors import verdict
from threadwarden.agents.pydantic_ai._memory import (
    MEMORY_KINDS,
    TRANSCRIPT,
    message_history,
    render,
    standing,
    transcript,
)
from threadwarden.agents.pydantic_ai._model import JournaledModel, summarize
from threadwarden.agents.pydantic_ai._tools import journaled
from threadwarden.bindings import AttemptContext, Binding, Completed, Failed, Memory, Outcome
from threadwarden.errors import InvalidInput

Deps = Callable[[AttemptContext], Any]
"""Builds the agent's ``deps`` for one attempt (from its context)."""


def _output(value: Any) -> Any:
    """Text stays text; a structured output is its JSON."""
    return to_jsonable_python(value, fallback=str)


@dataclass
class _Runner:
    """Runs the agent for one attempt with the journaled model, toolsets and approvals."""

    agent: Agent[Any, Any]
    idempotent: frozenset[str]
    deps: Deps | None
    usage_limits: UsageLimits | None
    memory: Memory
    _model: Model | None = field(default=None, init=False)
    """The agent's model, inferred on first use."""

    def _base_model(self) -> Model:
        if self._model is None:
            assert self.agent.model is not None
            self._model = infer_model(self.agent.model)
        return self._model

    def _summarizer(self, ctx: AttemptContext) -> JournaledModel:
        chosen = self.memory.summarizer
        model = self._base_model() if chosen is None else infer_model(chosen)
        return JournaledModel(model, ctx, live=False)

    async def _remember(self, ctx: AttemptContext, prompt: str) -> HeldMemory:
        """The thread's memory for this turn, compacted first when it would pass the budget."""
        summarizer = self._summarizer(ctx)

        async def ask(instructions: str, text: str) -> str:
            return await summarize(summarizer, instructions, text)

        compactor = Compactor(ctx, self.memory, TRANSCRIPT, ask, extra=standing)
        return await remember(compactor, ctx.history, prompt, render=render, build=message_history)

    async def _run(self, ctx: AttemptContext, prompt: str, decide: Decide) -> AgentRunResult[Any]:
        agent = self.agent
        toolsets = [journaled(t, ctx, self.idempotent) for t in agent.toolsets]
        memory = await self._remember(ctx, prompt)
        model = JournaledModel(self._base_model(), ctx, memory)
        with (
            attempt(ctx),
            agent.override(model=model, toolsets=toolsets, tools=[]),
            ToolManager.parallel_execution_mode("sequential"),  # steps in one order
        ):
            return await agent.run(
                prompt,
                message_history=memory.given,
                # Both ids are in the messages: fixed, a re-run rebuilds the same transcript.
                run_id=ctx.submission_id,
                conversation_id=ctx.thread_id,
                deps=None if self.deps is None else self.deps(ctx),
                usage_limits=self.usage_limits,
                capabilities=[HandleDeferredToolCalls(handler=decide)],
            )

    async def handle(self, ctx: AttemptContext) -> Outcome:
        try:
            prompt = user_prompt(ctx.input)
        except InvalidInput as refused:
            return Failed(str(refused))

        try:
            result = await self._run(ctx, prompt, deferred_handler(ctx))
        except (Exception, BaseExceptionGroup) as raised:
            return judged(raised, verdict)
        if isinstance(result.output, DeferredToolRequests):  # not reached: decide answers all
            names = ", ".join(c.tool_name for c in result.output.calls) or "approvals"
            return Failed(f"output: the run deferred {names} and none was answered")
        await ctx.append(TRANSCRIPT, transcript(result.new_messages()))
        return Completed(result=_output(result.output))


def agent_binding(
    agent: Agent[Any, Any],
    *,
    agent_id: str | None = None,
    idempotent_tools: Collection[str] = (),
    deps: Deps | None = None,
    usage_limits: UsageLimits | None = None,
    memory: Memory | None = None,
) -> Binding:
    """A `Binding` that runs ``agent`` (pydantic-ai) inside threadwarden's attempts.

    Args:
        agent: The agent; its model, instructions, tools and output type make the digest.
        agent_id: The binding's agent id (default: ``agent.name``, which must then be set).
        idempotent_tools: Tools safe to run twice; every other tool is a side effect whose
            interrupted call waits as ``unknown`` for an operator.
        deps: Builds the run's ``deps`` from the attempt context (default: none).
        usage_limits: pydantic-ai usage limits for each run; exceeding one fails the turn.
        memory: How the thread is kept within the model's context (default ``Memory()``: no
            budget; a request the model refuses for its length is summarized and sent again).
            A budget or a summarizer is part of the digest.
    """
    name = agent_id if agent_id is not None else agent.name
    if not name:
        raise InvalidInput("agent.name", "a named agent (Agent(..., name=...)) or agent_id=")
    memory = memory if memory is not None else Memory()
    definition = {**read_definition(agent), **memory_definition(memory)}
    runner = _Runner(
        agent,
        idempotent=frozenset(idempotent_tools),
        deps=deps,
        usage_limits=usage_limits,
        memory=memory,
    )
    return Binding(
        agent_id=name,
        digest=digest("pydantic-ai", definition),
        handler=runner.handle,
        history_kinds=MEMORY_KINDS,
    )
