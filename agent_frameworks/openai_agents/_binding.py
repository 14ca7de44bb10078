"""`agent_binding`: an OpenAI Agents SDK `Agent` run as a threadwarden binding."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from agents import Agent, ModelProvider, MultiProvider, RunConfig, Runner, RunResult, RunState
from agents.run_config import ToolExecutionConfig
from pydantic_core import to_jsonable_python

from threadwarden.agents._core.compaction import Compactor, remember
from threadwarden.agents._core.definition import digest, memory_definition
from threadwarden.agents._core.delegation import attempt
from threadwarden.agents._core.errors import judged
from threadwarden.agents._core.steps import user_prompt
from threadwarden.agents.openai_agents._approvals import approved
from threadwarden.agents.openai_agents._definition import read_definition
from threadwarden.agents.openai_agents._delegation import Handoffs
from threadwarden.agents.openai_agents._errors import verdict
from threadwarden.agents.openai_agents._memory import (
    MEMORY_KINDS,
    TRANSCRIPT,
    earlier_items,
    render,
    transcript,
)
from threadwarden.agents.openai_agents._model import JournaledModel
from threadwarden.agents.openai_agents._tools import journaled_agents
from threadwarden.agents.openai_agents._tracing import warn_if_traces_go_to_openai
from threadwarden.bindings import AttemptContext, Binding, Completed, Failed, Memory, Outcome
from threadwarden.errors import InvalidInput

Context = Callable[[AttemptContext], Any]
"""Builds the run's ``context`` for one attempt (from its attempt context)."""


@dataclass(frozen=True)
class _Runner:
    """Runs the agent for one attempt: journaled model and tools, approvals as inbox waits."""

    agent: Agent[Any]
    idempotent: frozenset[str]
    context: Context | None
    max_turns: int
    provider: ModelProvider | None
    memory: Memory

    async def handle(self, ctx: AttemptContext) -> Outcome:
        warn_if_traces_go_to_openai()  # once per process; tracing stays the application's
        try:
            prompt = user_prompt(ctx.input)
        except InvalidInput as refused:
            return Failed(str(refused))
        model = JournaledModel(ctx, self.provider or MultiProvider())

        async def ask(instructions: str, text: str) -> str:
            chosen = self.memory.summarizer or self.agent.model
            return await model.summarize(chosen, instructions, text)

        compactor = Compactor(ctx, self.memory, TRANSCRIPT, ask)
        try:
            with attempt(ctx):
                model.memory = await remember(
                    compactor, ctx.history, prompt, render=render, build=earlier_items
                )
                earlier = model.memory.given
                result = await self._run(
                    ctx, model, [*earlier, {"role": "user", "content": prompt}]
                )
        except (Exception, BaseExceptionGroup) as raised:
            return judged(raised, verdict)
        await ctx.append(TRANSCRIPT, transcript(result.to_input_list(), len(earlier)))
        return Completed(result=to_jsonable_python(result.final_output, fallback=str))

    async def _run(self, ctx: AttemptContext, model: JournaledModel, items: list[Any]) -> RunResult:
        config = RunConfig(
            model=model,
            call_model_input_filter=model.note_agent,
            tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1),
        )
        agent = journaled_agents(self.agent, ctx, self.idempotent)
        options: dict[str, Any] = {
            "context": None if self.context is None else self.context(ctx),
            "max_turns": self.max_turns,
            "hooks": Handoffs(ctx),
            "run_config": config,
        }
        result = await Runner.run(agent, items, **options)

        async def resume(state: RunState[Any]) -> RunResult:
            return await Runner.run(agent, state, **options)

        return await approved(ctx, result, resume)


def agent_binding(
    agent: Agent[Any],
    *,
    agent_id: str | None = None,
    idempotent_tools: Collection[str] = (),
    context: Context | None = None,
    max_turns: int = 10,
    model_provider: ModelProvider | None = None,
    memory: Memory | None = None,
) -> Binding:
    """A `Binding` that runs ``agent`` (OpenAI Agents SDK) inside threadwarden's attempts.

    Args:
        agent: The agent; its model, instructions, tools, output type and handoffs make the
            digest. Handoffs must be agents (their tools are journaled too).
        agent_id: The binding's agent id (default: ``agent.name``).
        idempotent_tools: Function tools safe to run twice; every other one is a side effect
            whose interrupted call waits as ``unknown`` for an operator.
        context: Builds the run's ``context`` from the attempt context (default: none).
        max_turns: The run's turn limit; exceeding it fails the submission.
        model_provider: Resolves agents' model names (default: the SDK's `MultiProvider`).
            Tracing stays the application's choice (the SDK's own settings apply); the first
            run in a process logs one warning when the SDK would send traces to OpenAI without
            a real key or while ``OPENAI_BASE_URL`` names another server.
        memory: How the thread is kept within the model's context (default ``Memory()``: no
            budget; a request the model refuses for its length is summarized and sent again).
            Its ``summarizer`` is a `Model` or a model name; a budget or a summarizer is part
            of the digest.
    """
    name = agent_id if agent_id is not None else agent.name
    if not name:
        raise InvalidInput("agent.name", "a named agent or agent_id=")
    memory = memory if memory is not None else Memory()
    definition = {**read_definition(agent), **memory_definition(memory)}
    runner = _Runner(
        agent,
        idempotent=frozenset(idempotent_tools),
        context=context,
        max_turns=max_turns,
        provider=model_provider,
        memory=memory,
    )
    return Binding(
        agent_id=name,
        digest=digest("openai-agents", definition),
        handler=runner.handle,
        history_kinds=MEMORY_KINDS,
    )
