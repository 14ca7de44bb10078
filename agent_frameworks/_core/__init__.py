"""The shared core every framework adapter stands on (docs/agents.md, "A new framework").

Each module holds one purpose; an adapter's module of the same role imports from it:

- `steps`: the user turn and the tool name a model request is journaled under.
- `spans`: the span of a model request really sent.
- `budget`: a model step's tokens spent from a delegation's budget.
- `approvals`: a tool call that needs a person, as an inbox wait.
- `delegation`: a tool that runs a request as a child submission for another agent.
- `errors`: what every adapter judges alike (transient statuses, the framework-independent
  verdicts) and the unwrapping of the runtime's stops from exception groups.
- `definition`: the digest of what defines an agent (and its memory settings).
- `compaction`: long threads: what the next request remembers of the thread, and summaries.

The core imports no adapter (an import-linter contract keeps it so).
"""
