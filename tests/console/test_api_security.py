"""Who may use the HTTP API: the console token may do everything, the application token all but
resolve, each decision records the token's name; other origins and hosts are kept out; the
OpenAPI document is valid."""

from __future__ import annotations

import logging
from typing import Any

import asyncpg
import httpx
import pytest
from openapi_spec_validator import validate

from tests.console.api import error_of, ledger_snapshot, post, state_of
from tests.console.conftest import ServeConsole
from tests.helpers.cli import unknown_side_effect
from threadwarden.client.client import ThreadwardenClient
from threadwarden.console.api import create_api

CONSOLE_TOKEN = "console-token-0123456789abcdef"
APP_TOKEN = "app-token-0123456789abcdef012"


async def test_tokens_decide_who_may_do_what_and_name_the_operator(
    worker: None,
    client: ThreadwardenClient,
    serve_console: ServeConsole,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    served = serve_console(
        console_token=CONSOLE_TOKEN, api_token=APP_TOKEN, api_token_name="web-app"
    )
    async with served as url, httpx.AsyncClient(base_url=url, timeout=30) as anonymous:
        app = httpx.AsyncClient(
            base_url=url, timeout=30, headers={"authorization": f"Bearer {APP_TOKEN}"}
        )
        console = httpx.AsyncClient(
            base_url=url, timeout=30, headers={"authorization": f"Bearer {CONSOLE_TOKEN}"}
        )
        async with app, console:
            before = await ledger_snapshot(pool)
            body = {"agent": "scripted", "input": [{"approval": "x"}]}
            for refused in (
                await post(anonymous, f"/v1/threads/{ids}/submissions", body),
                await post(
                    anonymous,
                    f"/v1/threads/{ids}/submissions",
                    body,
                    authorization="Bearer wrong-token-0123456789",
                ),
                await anonymous.get("/v1/inbox"),
                await anonymous.get(f"/v1/threads/{ids}/events"),
            ):
                assert refused.status_code == 401, refused.text
                assert error_of(refused)["code"] == "unauthorized"
                assert refused.headers["www-authenticate"] == "Bearer"
            assert await ledger_snapshot(pool) == before

            admitted = await post(app, f"/v1/threads/{ids}/submissions", body)
            assert admitted.status_code == 201
            submission_id = admitted.json()["submission_id"]
            await state_of(app, submission_id, "approval")
            approved = await post(app, f"/v1/submissions/{submission_id}/approve", {})
            assert approved.json()["operator"] == "web-app"
            [decision] = [r for r in await client.records(ids) if r["kind"] == "approval-decision"]
            assert decision["body"] == {"approved": True, "operator": "web-app"}

            unknown = await unknown_side_effect(pool, f"{ids}-u")
            # The worker's passes may still touch rows (leases, the approved turn): what a
            # resolve would write is the unknown one's state and its records.
            decided = await _decided(pool, unknown)
            resolve = f"/v1/submissions/{unknown}/resolve"
            forbidden = await post(app, resolve, {"outcome": "not-run"})
            assert forbidden.status_code == 403 and error_of(forbidden)["code"] == "forbidden"
            assert await _decided(pool, unknown) == decided  # nothing decided, nothing written
            resolved = await post(console, resolve, {"outcome": "not-run"})
            assert resolved.status_code == 200 and resolved.json()["operator"] == "operator"

            aborted = await post(app, f"/v1/submissions/{unknown}/abort", {})
            assert aborted.status_code == 200


async def test_other_origins_and_hosts_are_refused_unless_allowed(
    http: httpx.AsyncClient, serve_console: ServeConsole, pool: asyncpg.Pool[Any], ids: str
) -> None:
    body = {"agent": "scripted", "input": [{"say": "x"}]}
    before = await ledger_snapshot(pool)
    evil = await post(http, f"/v1/threads/{ids}/submissions", body, origin="https://evil.test")
    assert evil.status_code == 403 and error_of(evil)["code"] == "forbidden_origin"
    rebound = await post(http, f"/v1/threads/{ids}/submissions", body, host="evil.test")
    assert rebound.status_code == 403 and error_of(rebound)["code"] == "forbidden_host"
    preflight = await http.options(
        f"/v1/threads/{ids}/submissions",
        headers={"origin": "https://evil.test", "access-control-request-method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers
    assert await ledger_snapshot(pool) == before
    same = await post(
        http, f"/v1/threads/{ids}/submissions", body, origin=str(http.base_url).rstrip("/")
    )
    assert same.status_code == 201, same.text

    allowed = "https://app.example.com"
    async with (
        serve_console(api_allowed_origins=[allowed, "http://localhost:5173"]) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as cors,
    ):
        preflight = await _preflight(cors, f"/v1/threads/{ids}/submissions", allowed)
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == allowed
        sent = await post(cors, f"/v1/threads/{ids}/submissions", body, origin=allowed)
        assert sent.status_code == 201
        assert sent.headers["access-control-allow-origin"] == allowed

        # Refused preflights are the API's errors too (Starlette's own: plain text).
        put = await _preflight(cors, f"/v1/threads/{ids}", allowed, method="PUT")
        assert put.status_code == 400
        assert error_of(put)["field"] == "Access-Control-Request-Method"
        evil_preflight = await _preflight(cors, f"/v1/threads/{ids}", "https://evil.test")
        refusal = error_of(evil_preflight)
        assert (evil_preflight.status_code, refusal["code"]) == (403, "forbidden_origin")
        assert refusal["message"].startswith(
            "the origin 'https://evil.test' may not call this API: THREADWARDEN_API_ALLOWED_ORIGINS"
            " allows https://app.example.com, http://localhost:5173"
        )


async def _preflight(
    http: httpx.AsyncClient, path: str, origin: str, method: str = "POST"
) -> httpx.Response:
    """A browser's CORS preflight of a ``method`` with a JSON body from ``origin``."""
    return await http.options(
        path,
        headers={
            "origin": origin,
            "access-control-request-method": method,
            "access-control-request-headers": "content-type",
        },
    )


async def test_a_page_on_127_0_0_1_is_told_localhost_is_another_origin_and_logged_once(
    serve_console: ServeConsole, ids: str, caplog: pytest.LogCaptureFixture
) -> None:
    page = "http://127.0.0.1:5173"
    async with (
        serve_console(api_allowed_origins=["http://localhost:5173"]) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        refusals = [
            await _preflight(http, f"/v1/threads/{ids}/submissions", page),
            await http.get(f"/v1/threads/{ids}/events", headers={"origin": page}),
        ]
    for refused in refusals:
        error = error_of(refused)
        assert (refused.status_code, error["code"], error["field"]) == (
            403,
            "forbidden_origin",
            "Origin",
        )
        assert "THREADWARDEN_API_ALLOWED_ORIGINS allows http://localhost:5173" in error["message"]
        assert "127.0.0.1 and localhost are different origins" in error["message"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w for w in warnings if page in w] == [f"api: {error['message']}"]


async def test_the_openapi_document_is_valid_and_names_every_route(
    http: httpx.AsyncClient,
) -> None:
    answer = await http.get("/v1/openapi.json")
    assert answer.status_code == 200
    document = answer.json()
    validate(document)  # raises on an invalid OpenAPI 3.1 document
    assert set(document["paths"]) == {
        "/v1/openapi.json",
        "/v1/threads/{thread_id}/submissions",
        "/v1/threads/{thread_id}",
        "/v1/threads/{thread_id}/events",
        "/v1/threads/{thread_id}/turns",
        "/v1/submissions/{submission_id}",
        "/v1/submissions/{submission_id}/result",
        "/v1/inbox",
        *(
            f"/v1/submissions/{{submission_id}}/{action}"
            for action in ("approve", "deny", "answer", "resolve", "abort")
        ),
    }
    paths = {getattr(route, "path", "") for route in create_api().routes}
    served = {f"/v1{path}" for path in paths}
    assert served == set(document["paths"])


async def _decided(pool: asyncpg.Pool[Any], submission_id: str) -> tuple[Any, ...]:
    """The submission's state and outcome and its records: what a decision would change."""
    row = await pool.fetchrow(
        "SELECT state, outcome FROM threadwarden.submissions WHERE submission_id = $1",
        submission_id,
    )
    records = await pool.fetch(
        "SELECT sequence, kind, body FROM threadwarden.records WHERE submission_id = $1"
        " ORDER BY sequence",
        submission_id,
    )
    return tuple(row or ()), [tuple(r) for r in records]
