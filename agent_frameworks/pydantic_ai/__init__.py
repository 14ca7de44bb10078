"""pydantic-ai agents as threadwarden bindings (extra ``threadwarden[pydantic-ai]``).

``agent_binding(agent, idempotent_tools={...})`` returns a `threadwarden.Binding`; see
docs/agents.md for what each pydantic-ai feature maps to.
"""

from threadwarden.agents.pydantic_ai._binding import Deps, agent_binding
from threadwarden.agents.pydantic_ai._delegation import delegation_tool
from threadwarden.agents.pydantic_ai._memory import TRANSCRIPT

__all__ = ["TRANSCRIPT", "Deps", "agent_binding", "delegation_tool"]
