"""Agent frameworks as threadwarden bindings (docs/agents.md).

``threadwarden.agents.pydantic_ai`` (extra ``threadwarden[pydantic-ai]``) and
``threadwarden.agents.openai_agents`` (extra ``threadwarden[openai-agents]``) turn an agent
written with that framework into a `threadwarden.Binding`: the framework's loop runs inside the
attempt, every model request and tool call is a journal step, approvals are inbox waits, and
the thread's earlier exchanges are the agent's memory. ``threadwarden.agents.langgraph`` (extra
``threadwarden[langgraph]``) runs a LangGraph graph on a checkpointer in the ledger. This room
imports only the public API.
"""
