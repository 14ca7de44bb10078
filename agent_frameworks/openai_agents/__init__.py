"""OpenAI Agents SDK agents as threadwarden bindings (extra ``threadwarden[openai-agents]``)."""
