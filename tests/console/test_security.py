"""The console's guard: loopback by default, the token elsewhere, CSRF, escaping, body limit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from tests.console.conftest import ServeConsole
from tests.console.helpers import csrf_of, settled_state, submit_until
from tests.helpers.cli import unknown_side_effect
from threadwarden.client.client import ThreadwardenClient
from threadwarden.errors import InvalidInput

TOKEN = "console-token-0123456789abcdef"


async def test_console_refuses_to_bind_beyond_loopback_without_a_token(
    serve_console: ServeConsole,
) -> None:
    with pytest.raises(InvalidInput) as refused:
        async with serve_console(console_address="0.0.0.0:0"):
            pytest.fail("the console listened on every interface without a token")
    assert refused.value.field == "console_address"
    assert "THREADWARDEN_CONSOLE_TOKEN" in str(refused.value)
    async with (
        serve_console(console_address="0.0.0.0:0", console_token=TOKEN) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        assert (await http.get("/", params={"format": "json"})).status_code == 401


@pytest.fixture
async def guarded(serve_console: ServeConsole) -> AsyncIterator[httpx.AsyncClient]:
    """A client on a console with a token (named ``alice``), sending no credentials."""
    async with (
        serve_console(console_token=TOKEN, console_token_name="alice") as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        yield http


async def test_console_with_a_token_refuses_requests_without_it(
    pool: asyncpg.Pool[Any], guarded: httpx.AsyncClient, ids: str
) -> None:
    unknown = await unknown_side_effect(pool, ids)
    for path in ("/", f"/threads/{ids}", "/inbox", f"/hosts/{ids}"):
        refused = await guarded.get(path, params={"format": "json"})
        assert refused.status_code == 401 and refused.json()["code"] == "unauthorized", path
        page = await guarded.get(path)
        assert page.status_code == 303 and page.headers["location"].startswith("/login?next=")
    assert (await guarded.get(f"/threads/{ids}/events")).status_code == 401
    wrong = {"authorization": "Bearer not-the-token-at-all"}
    assert (await guarded.get("/inbox", headers=wrong)).status_code == 303
    post = await guarded.post(f"/submissions/{unknown}/resolve", data={"outcome": "fail"})
    assert post.status_code == 401
    assert (await guarded.get("/static/htmx.min.js")).status_code == 200  # no secret there


async def test_console_bearer_token_and_login_cookie_act_as_the_token_name(
    pool: asyncpg.Pool[Any], client: ThreadwardenClient, guarded: httpx.AsyncClient, ids: str
) -> None:
    unknown = await unknown_side_effect(pool, ids)
    bearer = {"authorization": f"Bearer {TOKEN}"}
    token = await csrf_of(guarded, "/inbox", headers=bearer)
    assert "Sign out (alice)" in (await guarded.get("/inbox", headers=bearer)).text
    resolved = await guarded.post(
        f"/submissions/{unknown}/resolve",
        params={"format": "json"},
        headers={**bearer, "x-csrf-token": token},
        data={"outcome": "not-run"},
    )
    assert resolved.status_code == 200 and resolved.json()["operator"] == "alice"
    [decision] = [r for r in await client.records(ids) if r["kind"] == "tool-resolution"]
    assert decision["body"]["operator"] == "alice" and decision["body"]["outcome"] == "not-run"

    bad = await guarded.post("/login", data={"token": "guess-guess-guess", "next": "/inbox"})
    assert bad.status_code == 401 and "set-cookie" not in bad.headers
    signed = await guarded.post("/login", data={"token": TOKEN, "next": "/inbox"})
    assert signed.status_code == 303 and signed.headers["location"] == "/inbox"
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert TOKEN not in cookie  # a value derived from the token, not the token
    page = await guarded.get("/inbox")  # the client keeps the cookie
    assert page.status_code == 200 and "Sign out (alice)" in page.text


async def test_console_refuses_a_post_without_its_csrf_token(
    pool: asyncpg.Pool[Any], client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    unknown = await unknown_side_effect(pool, ids)
    path = f"/submissions/{unknown}/resolve"
    missing = await http.post(path, data={"outcome": "fail"})
    assert missing.status_code == 403 and "CSRF" in missing.text
    wrong = await http.post(path, data={"outcome": "fail", "csrf_token": "0" * 64})
    assert wrong.status_code == 403
    header = await http.post(path, json={"outcome": "fail"}, headers={"x-csrf-token": "x"})
    assert header.status_code == 403
    as_json = await http.post(path, params={"format": "json"}, data={"outcome": "fail"})
    assert as_json.status_code == 403  # the documented JSON error under ?format=json
    assert as_json.json() == {
        "error": "CSRF token missing or wrong",
        "field": "csrf_token",
        "code": "csrf",
    }
    submit = await http.post("/submit", data={"thread": ids, "agent": "scripted", "input": "[]"})
    assert submit.status_code == 403
    assert await settled_state(client, ids, unknown) == "unknown"  # nothing was decided
    assert len((await client.thread_status(ids)).submissions) == 1


async def test_console_escapes_agent_output_everywhere(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    evil = "<script>alert('x')</script>"
    await submit_until(client, ids, [{"say": evil}, {"approval": f"ok? {evil}"}], "suspended")
    for path in (f"/threads/{ids}", "/inbox"):
        page = await http.get(path)
        assert page.status_code == 200
        assert "<script>alert" not in page.text, path
        assert "&lt;script&gt;alert(" in page.text, path
    policy = (await http.get("/inbox")).headers["content-security-policy"]
    assert "script-src 'self'" in policy  # and an injected inline script would not run


async def test_console_refuses_a_body_over_its_limit(
    pool: asyncpg.Pool[Any], client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    unknown = await unknown_side_effect(pool, ids)
    token = await csrf_of(http)
    path = f"/submissions/{unknown}/resolve"
    result = '"' + "x" * 140_000 + '"'
    declared = await http.post(path, data={"csrf_token": token, "outcome": "ran", "result": result})
    assert declared.status_code == 413

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b"a" * 10_000

    chunked = await http.post(
        path, content=chunks(), headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert chunked.status_code == 413
    assert await settled_state(client, ids, unknown) == "unknown"


async def test_console_without_a_token_answers_only_to_loopback_host_names(
    http: httpx.AsyncClient,
) -> None:
    for host in ("127.0.0.1:8470", "localhost", "[::1]:8470"):
        assert (await http.get("/inbox", headers={"host": host})).status_code == 200, host
    rebound = await http.get("/inbox", headers={"host": "attacker.example:8470"})
    assert rebound.status_code == 403 and "loopback" in rebound.text
