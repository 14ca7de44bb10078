"""Delegation from a graph to another threadwarden agent: not supported yet.

The pydantic-ai and Agents SDK adapters give the model a tool ``ask_<agent_id>`` whose call is a
child submission (`AttemptContext.call_agent`, a journal step of its own). A graph's tools run in
its `ToolNode`s, and this adapter journals every `ToolNode` call as a tool step
(`threadwarden.agents.langgraph._tools`): a child submission made inside one would be a journal
step inside another. A LangGraph delegation tool needs that wrapper to pass such a tool through
unjournaled, as the other adapters' toolsets do; until then a graph calls no other agent.
"""

UNSUPPORTED = (
    "a graph's ToolNode calls are each journaled as a tool step; a delegation (a child"
    " submission, a journal step of its own) would run inside one"
)
"""Why this adapter has no delegation tool (the adapter contract test records it)."""
