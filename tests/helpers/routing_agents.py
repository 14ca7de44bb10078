"""Two agents for the routing tests, each loaded by its own worker process:
``--bindings tests.helpers.routing_agents:ALPHA`` or ``…:BETA``. Each settles with the id of
the process that ran it, so a test sees which worker took the head."""

import os

from threadwarden.bindings import AttemptContext, Binding, Completed, Outcome


def _agent(agent_id: str) -> Binding:
    async def handle(context: AttemptContext) -> Outcome:
        return Completed({"agent": agent_id, "pid": os.getpid()})

    return Binding(agent_id=agent_id, digest=f"{agent_id}-v1", handler=handle)


ALPHA = [_agent("alpha")]
BETA = [_agent("beta")]
