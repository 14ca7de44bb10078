"""The long-thread shape's anchor: a LangGraph agent whose state is checkpointed by
``langgraph-checkpoint-postgres``'s `PostgresSaver` on the bench's PostgreSQL.

The graph is the smallest agent LangGraph users write: a ``messages`` channel (`MessagesState`,
whose reducer is ``add_messages``) and one node that calls the chat model on every message so far
and appends its answer. The model is `OfflineChatModel`, the same offline model as the other sides
(`bench.long_support.answer`). Each turn is one ``graph.invoke`` with the user's message on one
``thread_id``; the saver writes the checkpoint at the node's end, as deployed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph

from bench.long_support import WARM_UP, answer


class OfflineChatModel(BaseChatModel):
    """A LangChain chat model answering as `bench.long_support.answer` does (no network)."""

    @property
    def _llm_type(self) -> str:
        return "bench-offline"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        last = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        text = "" if last is None else str(last.content)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=answer(text)))])


def graph(saver: PostgresSaver) -> Any:
    """The agent: START → model → END over `MessagesState`, checkpointed by ``saver``."""
    model = OfflineChatModel()

    def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    return builder.compile(checkpointer=saver)


@contextlib.contextmanager
def graph_turns(dsn: str, thread_id: str) -> Iterator[Callable[[str], None]]:
    """The saver's tables set up in ``dsn`` and one warm-up turn (another thread) run; yields
    a function that runs one turn of ``thread_id``. Closes the saver's connection on exit."""
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        agent = graph(saver)

        def turn_of(thread: str) -> Callable[[str], None]:
            config = {"configurable": {"thread_id": thread}}

            def turn(text: str) -> None:
                agent.invoke({"messages": [HumanMessage(content=text)]}, config)

            return turn

        turn_of(f"{thread_id}-warm")(WARM_UP)
        yield turn_of(thread_id)
