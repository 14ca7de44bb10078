"""OpenAI Agents SDK agents as threadwarden bindings (extra ``threadwarden[openai-agents]``).

``agent_binding(agent, idempotent_tools={...})`` returns a `threadwarden.Binding`; see
docs/agents.md for what each SDK feature maps to.
"""

from threadwarden.agents.openai_agents._binding import Context, agent_binding
from threadwarden.agents.openai_agents._delegation import HANDOFF, delegation_tool
from threadwarden.agents.openai_agents._memory import TRANSCRIPT

__all__ = ["HANDOFF", "TRANSCRIPT", "Context", "agent_binding", "delegation_tool"]
