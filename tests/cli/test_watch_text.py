"""Issue 30 item 7: ``watch`` prints each record in a few words, a model's reply as its text
(whichever framework journaled it); ``--verbose`` prints the whole body."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, message_to_dict
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart

from tests.console.helpers import wait_for_state
from tests.helpers.cli import run_cli
from threadwarden.agents.openai_agents._model import dump
from threadwarden.cli.record_text import summary
from threadwarden.client.client import ThreadwardenClient


def _result(value: Any) -> dict[str, Any]:
    return {"tool": "model-request", "result": value}


def test_a_pydantic_ai_reply_is_shown_as_its_text() -> None:
    response = ModelResponse(parts=[TextPart("Your refund is on its way.")])
    [recorded] = ModelMessagesTypeAdapter.dump_python([response], mode="json")
    body = _result({"response": recorded, "usage": {"input_tokens": 1, "output_tokens": 2}})
    assert summary("tool-result", body) == "Your refund is on its way."
    calling = ModelResponse(parts=[ToolCallPart("refund", {"cents": 5})])
    [recorded] = ModelMessagesTypeAdapter.dump_python([calling], mode="json")
    assert summary("tool-result", _result({"response": recorded})) == "(the model calls refund)"


def test_an_openai_agents_reply_is_shown_as_its_text() -> None:
    from agents import ModelResponse as AgentsResponse
    from agents import Usage
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    message = ResponseOutputMessage(
        id="m1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text="Hello there.", annotations=[])],
    )
    response = AgentsResponse(output=[message], usage=Usage(), response_id=None)
    assert summary("tool-result", _result(dump(response))) == "Hello there."


def test_a_langgraph_reply_is_shown_as_its_text() -> None:
    recorded = message_to_dict(AIMessage(content="The jacket fits."))
    assert summary("tool-result", _result({"response": recorded})) == "The jacket fits."


def test_other_records_are_summed_up_in_one_line() -> None:
    assert summary("message", {"text": "two\nlines"}) == "two lines"
    assert summary("settlement", {"outcome": "failed", "reason": "out of stock"}) == (
        "failed: out of stock"
    )
    assert summary("tool-call", {"tool": "lookup", "args": {"q": "x"}}) == 'calls lookup {"q":"x"}'
    assert len(summary("note", {"blob": "x" * 1000})) == 200


@pytest.mark.usefixtures("cli_env", "worker")
async def test_watch_prints_text_and_verbose_prints_the_whole_body(
    client: ThreadwardenClient, capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    receipt = await client.submit(ids, agent_id="scripted", input=[{"say": "hello there"}])
    await wait_for_state(client, ids, receipt.submission_id, "completed")
    capsys.readouterr()
    assert await run_cli("watch", ids, "--no-follow") == 0
    message, settlement = capsys.readouterr().out.strip().splitlines()
    assert message.endswith(f"{receipt.submission_id}  hello there")
    assert settlement.endswith('completed: {"said":["hello there"]}')
    assert await run_cli("watch", ids, "--no-follow", "--verbose") == 0
    message = capsys.readouterr().out.strip().splitlines()[0]
    assert json.loads(message.split("  ")[-1]) == {"text": "hello there"}
