"""Subagent children on the console's pages (issue 13, observability): a child links to its
parent's thread, a parent waiting for its children says ``child`` and names them, and neither
the threads list's ``waiting`` badge nor the inbox counts that wait as one for a person.
Children are established through the ledger directly (`Family`); no worker runs."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx

from tests.helpers.children import Family


async def test_console_shows_a_child_wait_as_child_not_as_waiting_for_a_person(
    pool: asyncpg.Pool[Any], http: httpx.AsyncClient, ids: str
) -> None:
    family = Family.on(pool, ids)
    parent, (child,), _ = await family.waiting_parent(1)
    asking = Family.on(pool, f"{ids}-ask")
    approval = await asking.parent()
    await asking.ask_approval(approval, "ok?", step=1)

    # The child's row links to the parent submission on the parent's thread.
    page = await http.get(f"/threads/{child.thread_id}", params={"format": "json"})
    (shown,) = page.json()["submissions"]
    assert (shown["parent_submission_id"], shown["parent_thread_id"]) == (
        parent.submission_id,
        parent.thread_id,
    )
    html = (await http.get(f"/threads/{child.thread_id}")).text
    link = f'<a href="/threads/{parent.thread_id}#sub-{parent.submission_id}">'
    assert f"child of {link}{parent.submission_id}</a>" in html

    # The parent says child and names the child it waits for, with no link to the inbox.
    page = await http.get(f"/threads/{parent.thread_id}", params={"format": "json"})
    (waiting,) = page.json()["submissions"]
    assert (waiting["waiting_for"], waiting["children"]) == ("child", [child.submission_id])
    fragment = (
        await http.get(f"/threads/{parent.thread_id}", params={"fragment": "submissions"})
    ).text
    assert f'<span class="children">{child.submission_id}</span>' in fragment
    assert 'href="/inbox"' not in fragment

    # Both threads hold one suspended submission; only the approval waits for a person.
    listed = await http.get("/", params={"q": ids, "format": "json"})
    rows = {r["thread_id"]: r for r in listed.json()["threads"]}
    assert rows[parent.thread_id]["states"] == {"suspended": 1}
    assert rows[approval.thread_id]["states"] == {"suspended": 1}
    assert (rows[parent.thread_id]["waiting"], rows[approval.thread_id]["waiting"]) == (0, 1)
    inbox = await http.get("/inbox", params={"format": "json"})
    assert [e["submission_id"] for e in inbox.json()["entries"]] == [approval.submission_id]
