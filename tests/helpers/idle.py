"""A host at rest in end-to-end tests: brought there before a test's own steps, and woken
there (brief scenario 7: wakes on a host that only waits change nothing)."""

from __future__ import annotations

from tests.helpers.checks import assert_settled_once, quiescent, say
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.views import HostStatus, Receipt


async def idle_host(
    client: ThreadwardenClient, connections: Connections, host: str, text: str = "hello"
) -> Receipt:
    """Settle one scripted submission on thread ``host`` (once: `assert_settled_once`) and wait
    until the host is quiescent: no pass of that settlement is still to come, so the passes a
    test counts (or the snapshot it compares) are its own. Returns the submission's receipt."""
    receipt = await client.submit(host, agent_id="scripted", input=say(text))
    await assert_settled_once(client, host, 1)
    await quiescent(client, connections, host)
    return receipt


async def woken_at_rest(
    client: ThreadwardenClient, connections: Connections, host: str, waiting: HostStatus
) -> HostStatus:
    """Wake a host whose work only waits (``waiting``: its acknowledged status) three more
    times; once a pass they caused ran and the host's run went idle again, its generation and
    alarm are as they were. Returns its status then."""
    for _ in range(3):
        await client.wake(host, reason="test")
    await eventually(
        lambda: client.host_status(host),
        lambda h: h.pass_epoch > waiting.pass_epoch,
        what=f"a pass woken on host {host} at rest",
    )
    await quiescent(client, connections, host)
    status = await client.host_status(host)
    assert (status.dirty, status.processed, status.alarm_at) == (waiting.dirty, waiting.dirty, None)
    return status
