"""LangGraph graphs as threadwarden bindings (extra ``threadwarden[langgraph]``).

``graph_binding(builder, agent_id=..., idempotent_tools={...})`` returns a
`threadwarden.Binding` whose graph runs on `LedgerSaver`, a checkpointer in the ledger fenced by
the attempt; see docs/agents.md for what each LangGraph feature maps to.
"""

from threadwarden.agents.langgraph._binding import graph_binding, graph_input
from threadwarden.agents.langgraph._memory import UPDATE, LedgerSaver
from threadwarden.agents.langgraph._model import JournaledChatModel, journaled
from threadwarden.agents.langgraph._tools import FAILED, INTERRUPTED

__all__ = [
    "FAILED",
    "INTERRUPTED",
    "UPDATE",
    "JournaledChatModel",
    "LedgerSaver",
    "graph_binding",
    "graph_input",
    "journaled",
]
