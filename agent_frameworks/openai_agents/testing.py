"""An Agents SDK `Model` answered by a function, as pydantic-ai's `FunctionModel` is: for
examples that run offline and for tests. Not journaled by itself: inside a binding its requests
are journal steps like any model's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from agents import Model, ModelResponse, Usage
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent

Reply = Callable[[list[dict[str, Any]]], list[TResponseOutputItem]]
"""The output items answering one request's input items (a string input is one user item)."""

__all__ = ["FunctionModel", "Reply"]


class FunctionModel(Model):
    """Answers each request with ``reply(input items)``; keeps every request's items in
    ``inputs``. ``tokens`` is the (input, output) usage it reports per request."""

    def __init__(self, reply: Reply, *, model: str = "function", tokens: tuple[int, int] = (20, 5)):
        self.reply = reply
        self.model = model
        self.tokens = tokens
        self.inputs: list[list[dict[str, Any]]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        *_: Any,  # the settings, tools, output schema, handoffs and tracing: not read
        **__: Any,  # the previous response's, conversation's and prompt's ids: not read
    ) -> ModelResponse:
        items: list[dict[str, Any]] = (
            [{"role": "user", "content": input}]
            if isinstance(input, str)
            else [cast(dict[str, Any], item) for item in input]
        )
        self.inputs.append(items)
        given, taken = self.tokens
        usage = Usage(
            requests=1, input_tokens=given, output_tokens=taken, total_tokens=given + taken
        )
        return ModelResponse(output=self.reply(items), usage=usage, response_id=None)

    def stream_response(self, *_: Any, **__: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("FunctionModel answers whole responses: use Runner.run")
