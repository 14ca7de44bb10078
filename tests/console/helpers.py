"""What the console tests share: reading the CSRF token off a page, waiting for states."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient

_CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]{64})"')


async def csrf_of(http: httpx.AsyncClient, path: str = "/inbox", **kwargs: Any) -> str:
    """The CSRF token the console's page at ``path`` carries in its forms."""
    page = await http.get(path, **kwargs)
    assert page.status_code == 200, page.text
    found = _CSRF.search(page.text)
    assert found is not None, page.text
    return found.group(1)


async def settled_state(client: ThreadwardenClient, thread_id: str, submission_id: str) -> str:
    """The submission's state, or its outcome once settled."""
    status = await client.thread_status(thread_id)
    view = next(s for s in status.submissions if s.submission_id == submission_id)
    return view.outcome or view.state


async def wait_for_state(
    client: ThreadwardenClient, thread_id: str, submission_id: str, wanted: str
) -> None:
    """Poll (with a deadline) until the submission reaches ``wanted`` (a state or outcome)."""
    await eventually(
        lambda: settled_state(client, thread_id, submission_id),
        lambda state: state == wanted,
        what=f"{submission_id} {wanted}",
    )
