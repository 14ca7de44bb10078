"""Two agents for the routing tests, each loaded by its own worker process:
``--bindings tests.helpers.routing_agents:ALPHA`` or ``…:BETA``. Each settles with the id of
the process that ran it, so a test sees which worker took the head."""

import os

from threadwarden.bindings import AttemptContext, Binding, Completed, Outcome


def _agent(agent_id: str, version: str = "v1") -> Binding:
    async def handle(context: AttemptContext) -> Outcome:
        return Completed({"agent": agent_id, "pid": os.getpid()})

    return Binding(agent_id=agent_id, digest=f"{agent_id}-{version}", handler=handle)


ALPHA = [_agent("alpha")]
ALPHA_V2 = [_agent("alpha", "v2")]
"""The next release of alpha, as a rolling deploy brings it up beside ``ALPHA``."""
BETA = [_agent("beta")]
