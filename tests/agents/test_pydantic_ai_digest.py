"""A pydantic-ai binding's digest hashes what defines the agent (docs/bindings.md "Digest pinning"):
model name, instructions, tools with their schemas and the output type; an unnamed agent is
refused."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from threadwarden.agents.pydantic_ai import agent_binding
from threadwarden.errors import InvalidInput


def _reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("x")])


class Answer(BaseModel):
    text: str


def _by_number(q: int) -> str:
    return "found"


def _by_text(q: str) -> str:
    return "found"


def _agent(
    *,
    model: str = "m1",
    instructions: str = "Be brief.",
    tool_arg: type = int,
    output: type = str,
) -> Agent[None, object]:
    agent: Agent[None, object] = Agent(
        FunctionModel(_reply, model_name=model),
        name="a",
        instructions=instructions,
        output_type=output,
    )

    agent.tool_plain(name="lookup")(_by_number if tool_arg is int else _by_text)
    return agent


def test_pydantic_ai_digest_is_stable_for_one_definition() -> None:
    assert agent_binding(_agent()).digest == agent_binding(_agent()).digest


@pytest.mark.parametrize(
    "changed",
    [
        {"model": "m2"},
        {"instructions": "Be thorough."},
        {"tool_arg": str},
        {"output": Answer},
    ],
    ids=["model", "instructions", "tool schema", "output type"],
)
def test_pydantic_ai_digest_changes_with_the_definition(changed: dict[str, object]) -> None:
    assert agent_binding(_agent(**changed)).digest != agent_binding(_agent()).digest  # type: ignore[arg-type]


def test_pydantic_ai_agent_without_a_name_is_refused_at_load() -> None:
    with pytest.raises(InvalidInput, match="^agent.name: expected a named agent"):
        agent_binding(Agent(FunctionModel(_reply)))
    assert agent_binding(Agent(FunctionModel(_reply)), agent_id="named").agent_id == "named"
