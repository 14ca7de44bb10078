"""What defines a LangGraph graph for its digest: its state keys and channel types, each node's
name and function, the edges, the branches and every `ToolNode` tool with its JSON schema (read
from the builder; nothing runs)."""

from __future__ import annotations

from typing import Any

from langgraph.graph import StateGraph
from pydantic_core import to_jsonable_python

from threadwarden.agents.langgraph._tools import tool_nodes


def read_definition(builder: StateGraph[Any, Any, Any, Any]) -> dict[str, Any]:
    """What defines the graph: its state keys, nodes (and their code), edges, branches and
    the tools of its tool nodes with their schemas."""
    nodes = {}
    for name, spec in builder.nodes.items():
        func = getattr(spec.runnable, "func", None) or getattr(spec.runnable, "afunc", None)
        nodes[name] = getattr(func, "__qualname__", type(spec.runnable).__name__)
    tools = {
        name: {
            tool.name: to_jsonable_python(tool.tool_call_schema.model_json_schema(), fallback=str)
            if hasattr(tool.tool_call_schema, "model_json_schema")
            else repr(tool.tool_call_schema)
            for tool in node.tools_by_name.values()
        }
        for name, node in tool_nodes(builder).items()
    }
    return {
        "state": {key: type(channel).__name__ for key, channel in builder.channels.items()},
        "nodes": nodes,
        "edges": sorted(builder.edges),
        "branches": {node: sorted(branches) for node, branches in builder.branches.items()},
        "tools": tools,
    }
