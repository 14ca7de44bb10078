"""The four pages and their JSON twins, over a real ledger, worker and Temporal."""

from __future__ import annotations

import httpx

from tests.console.conftest import ServeConsole
from tests.console.helpers import submit_until, wait_for_state
from tests.helpers.workers import Workers, with_bindings
from threadwarden.bindings import SUMMARY, AttemptContext, Binding, Completed
from threadwarden.client.client import ThreadwardenClient
from threadwarden.client.shapes import HOST_STATUS_FIELDS, THREAD_STATUS_FIELDS
from threadwarden.config.settings import Settings


async def test_console_threads_page_lists_filters_and_badges_waiting_threads(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    done = await client.submit(f"{ids}-a", agent_id="scripted", input=[{"say": "hi"}])
    asks = await client.submit(f"{ids}-b", agent_id="scripted", input=[{"approval": "refund"}])
    await client.submit("other-thread-" + ids, agent_id="scripted", input=[{"say": "x"}])
    await wait_for_state(client, done.thread_id, done.submission_id, "completed")
    await wait_for_state(client, asks.thread_id, asks.submission_id, "suspended")

    page = await http.get("/", params={"q": ids, "format": "json"})
    assert page.status_code == 200
    rows = {r["thread_id"]: r for r in page.json()["threads"]}
    assert set(rows) == {f"{ids}-a", f"{ids}-b"}  # the prefix filter left the other out
    assert rows[f"{ids}-a"]["states"] == {"completed": 1}
    assert rows[f"{ids}-a"]["waiting"] == 0 and rows[f"{ids}-a"]["last_kind"] == "settlement"
    assert rows[f"{ids}-b"]["states"] == {"suspended": 1} and rows[f"{ids}-b"]["waiting"] == 1
    assert rows[f"{ids}-b"]["host_id"] == f"{ids}-b"
    assert page.json()["next_after"] is None

    html = await http.get("/", params={"q": ids})
    assert html.status_code == 200 and "text/html" in html.headers["content-type"]
    assert f'href="/threads/{ids}-a"' in html.text and f'href="/hosts/{ids}-b"' in html.text
    assert "1 waiting" in html.text  # the badge on the thread whose approval is pending
    assert "other-thread" not in html.text


async def test_console_thread_page_shows_submissions_records_and_the_cli_shape(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    receipt = await submit_until(client, ids, [{"say": "hello there"}], "completed")

    page = await http.get(f"/threads/{ids}", params={"format": "json"})
    assert page.status_code == 200
    body = page.json()
    assert body["thread_id"] == ids and body["host_id"] == ids
    [submission] = body["submissions"]
    assert set(submission) == THREAD_STATUS_FIELDS  # `status --thread --json`'s fields
    assert submission["state"] == "settled" and submission["outcome"] == "completed"
    assert body["messages_sent"] == [] and body["older_records"] is False
    kinds = [r["kind"] for r in body["records"]]
    assert kinds[0] == "message" and kinds[-1] == "settlement"
    assert [r["sequence"] for r in body["records"]] == list(range(1, len(kinds) + 1))

    older = await http.get(f"/threads/{ids}", params={"before": "2", "format": "json"})
    assert [r["sequence"] for r in older.json()["records"]] == [1]
    assert (await http.get(f"/threads/{ids}", params={"before": "x"})).status_code == 400

    html = await http.get(f"/threads/{ids}")
    assert html.status_code == 200
    assert receipt.submission_id in html.text and "hello there" in html.text
    assert f'data-events="/threads/{ids}/events?after={len(kinds)}"' in html.text
    fragment = await http.get(f"/threads/{ids}", params={"fragment": "submissions"})
    assert fragment.text.lstrip().startswith('<table id="submissions"')


async def test_console_inbox_and_host_pages_answer_in_html_and_json(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    asks = await submit_until(client, ids, [{"approval": "send €5"}], "suspended")

    inbox = await http.get("/inbox", params={"format": "json"})
    mine = [e for e in inbox.json()["entries"] if e["submission_id"] == asks.submission_id]
    assert len(mine) == 1 and mine[0]["waiting_for"] == "approval"
    assert mine[0]["what"] == "send €5" and mine[0]["age_s"] >= 0
    assert set(inbox.json()) == {"entries", "more"}
    html = await http.get("/inbox")
    assert f"/submissions/{asks.submission_id}/approve" in html.text
    assert f"/submissions/{asks.submission_id}/deny" in html.text and "send €5" in html.text

    host = await http.get(f"/hosts/{ids}", params={"format": "json"})
    assert host.status_code == 200
    fields = host.json()
    assert set(fields) >= HOST_STATUS_FIELDS
    assert fields["dirty"] >= fields["processed"] and fields["host_id"] == ids
    assert [t["thread_id"] for t in fields["threads"]["threads"]] == [ids]
    html = await http.get(f"/hosts/{ids}")
    assert html.status_code == 200 and "dirty / processed" in html.text
    assert fields["workflow_url"] is None  # no Temporal UI was given to this console


async def test_console_unknown_ids_and_bad_ids_are_404_and_400_with_the_cli_error_codes(
    http: httpx.AsyncClient, ids: str
) -> None:
    for path in (f"/threads/{ids}-none", f"/hosts/{ids}-none"):
        missing = await http.get(path, params={"format": "json"})
        assert missing.status_code == 404 and missing.json()["code"] == "not_found"
        assert (await http.get(path)).status_code == 404
    bad = await http.get("/threads/a b", params={"format": "json"})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_input"
    assert bad.json()["field"] == "thread"
    assert (await http.get("/", params={"q": "no spaces"})).status_code == 400


async def test_console_host_page_links_the_hosts_runs_in_the_temporal_ui(
    serve_console: ServeConsole, client: ThreadwardenClient, settings: Settings, ids: str
) -> None:
    await client.submit(ids, agent_id="scripted", input=[{"say": "hi"}])
    async with (
        serve_console(temporal_ui_url="http://ui.example:8233/") as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        host = (await http.get(f"/hosts/{ids}", params={"format": "json"})).json()
        page = await http.get(f"/hosts/{ids}")
    namespace = settings.temporal_namespace
    assert host["workflow_url"] == (
        f"http://ui.example:8233/namespaces/{namespace}/workflows"
        f"?query=WorkflowId%3D%22threadwarden-host%2F{ids}%22"
    )
    assert f'href="{host["workflow_url"]}"' in page.text


async def test_console_thread_page_shows_the_range_a_summary_covers(
    workers: Workers, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    async def summarize(ctx: AttemptContext) -> Completed:
        await ctx.append(SUMMARY, {"of": "notes", "first": 1, "last": 7, "turns": 3, "text": "…"})
        hostile = {"of": "notes", "first": "<b>1</b>", "last": "<script>x</script>", "turns": 1}
        await ctx.append(SUMMARY, hostile)  # what an agent wrote is shown, never run
        await ctx.append(SUMMARY, ["not", "a", "summary body"])
        return Completed(result="summarized")

    binding = Binding(agent_id="summarizer", digest="summarizer-1", handler=summarize)
    async with workers.running(with_bindings(binding)):
        receipt = await client.submit(ids, agent_id="summarizer", input="go")
        await client.result(receipt.submission_id, timeout=30)

    html = await http.get(f"/threads/{ids}")
    assert html.status_code == 200
    assert "covers 3 turns, records #1–#7 (they stay below)" in html.text
    assert "records #&lt;b&gt;1&lt;/b&gt;–#&lt;script&gt;x&lt;/script&gt;" in html.text
    assert "<script>x</script>" not in html.text
