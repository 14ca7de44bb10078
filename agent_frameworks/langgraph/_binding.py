"""`graph_binding`: a LangGraph `StateGraph` run as a threadwarden binding."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from pydantic_core import to_jsonable_python

from threadwarden.agents._core.definition import digest
from threadwarden.agents._core.errors import judged
from threadwarden.agents.langgraph._approvals import answers
from threadwarden.agents.langgraph._chain import ABSENT, appended
from threadwarden.agents.langgraph._definition import read_definition
from threadwarden.agents.langgraph._errors import verdict
from threadwarden.agents.langgraph._memory import MEMORY_KINDS, LedgerSaver
from threadwarden.agents.langgraph._tools import journal_tools, running, tool_nodes
from threadwarden.bindings import AttemptContext, Binding, Completed, Failed, Outcome
from threadwarden.errors import InvalidInput

Graph = StateGraph[Any, Any, Any, Any] | CompiledStateGraph[Any, Any, Any, Any]


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value, fallback=repr)


def graph_input(value: Any, *, messages: bool) -> Any:
    """The submission's input as the graph's: a JSON object of state keys, or (for a graph
    with a ``messages`` key) a string, the new human message."""
    if isinstance(value, dict):
        return value
    if messages and isinstance(value, str) and value:
        return {"messages": [HumanMessage(content=value)]}
    expected = "a JSON object of the graph's input keys"
    raise InvalidInput("input", expected + (" or a non-empty string" if messages else ""), value)


def turn_result(values: dict[str, Any], carried: dict[str, Any]) -> dict[str, Any]:
    """A turn's result: the graph's final state ``values``, with each list the turn only
    appended to since the ``carried`` state (``messages``) cut to the items it appended, so
    that the result does not grow with the thread (a list the turn removed from or reordered
    stays whole)."""
    result = {}
    for key, value in values.items():
        items = appended(carried.get(key, ABSENT), value)
        result[key] = value if items is None else items
    return result


class _Runner:
    """Runs the graph for one attempt, on a checkpointer of the attempt's own."""

    def __init__(self, graph: Graph, *, recursion_limit: int) -> None:
        self._graph = graph
        self._builder = graph.builder if isinstance(graph, CompiledStateGraph) else graph
        self._messages = "messages" in self._builder.channels
        self._recursion_limit = recursion_limit

    def _compiled(self, saver: LedgerSaver) -> CompiledStateGraph[Any, Any, Any, Any]:
        if isinstance(self._graph, CompiledStateGraph):
            return self._graph.copy(update={"checkpointer": saver})
        return self._graph.compile(checkpointer=saver)

    async def handle(self, ctx: AttemptContext) -> Outcome:
        saver = await LedgerSaver.load(ctx)
        graph = self._compiled(saver)
        config: RunnableConfig = {
            "configurable": {"thread_id": ctx.thread_id},
            "recursion_limit": self._recursion_limit,
        }
        if saver.resuming:  # steps up to the saved work's are in the checkpoints
            ctx.advance_to(saver.position)
            run: Any = await answers(ctx, graph, config)
        else:
            try:
                run = graph_input(ctx.input, messages=self._messages)
            except InvalidInput as refused:
                return Failed(str(refused))
        with running(ctx):
            try:
                while True:
                    await graph.ainvoke(run, config, durability="sync")
                    run = await answers(ctx, graph, config)
                    if run is None:
                        break
            except (Exception, BaseExceptionGroup) as raised:
                return judged(raised, verdict)
        state = await graph.aget_state(config)
        return Completed(result=_jsonable(turn_result(state.values, saver.carried)))


def graph_binding(
    graph: Graph,
    *,
    agent_id: str,
    idempotent_tools: Collection[str] = (),
    recursion_limit: int = 25,
) -> Binding:
    """A `Binding` that runs a LangGraph graph inside threadwarden's attempts.

    The graph runs on a checkpointer in the ledger (`LedgerSaver`), one LangGraph thread per
    threadwarden thread: nodes finished before a crash or an ``interrupt`` never run again,
    and the graph's state carries across the thread's submissions.

    Args:
        graph: A `StateGraph` (compiled here), or a compiled graph without a checkpointer.
        agent_id: The binding's agent id.
        idempotent_tools: Tools of the graph's `ToolNode`s safe to run twice; every other
            tool is a side effect whose interrupted call waits as ``unknown`` for an operator.
        recursion_limit: LangGraph's limit of supersteps per run; reaching it fails the turn.
    """
    if isinstance(graph, CompiledStateGraph):
        if graph.checkpointer not in (None, False):
            raise InvalidInput(
                "graph", "a StateGraph, or a graph compiled without a checkpointer of its own"
            )
        if graph.interrupt_before_nodes or graph.interrupt_after_nodes:
            raise InvalidInput(
                "graph",
                "a graph compiled without interrupt_before/interrupt_after"
                " (ask with interrupt() inside a node)",
            )
    elif not isinstance(graph, StateGraph):
        raise InvalidInput("graph", "a langgraph StateGraph", type(graph).__name__)
    if not isinstance(recursion_limit, int) or recursion_limit < 1:
        raise InvalidInput("recursion_limit", "a positive integer", recursion_limit)
    runner = _Runner(graph, recursion_limit=recursion_limit)
    builder = runner._builder
    for node in tool_nodes(builder).values():
        journal_tools(node, frozenset(idempotent_tools))
    return Binding(
        agent_id=agent_id,
        digest=digest("langgraph", read_definition(builder)),
        handler=runner.handle,
        history_kinds=MEMORY_KINDS,
    )
