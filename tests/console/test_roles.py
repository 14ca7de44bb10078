"""Every rule the console's tokens promise, on each surface it applies to: the HTTP API (``/v1``)
and the console's pages and forms. Each rule names, per surface, the one test that proves it (in
the module ``here``, or in test_MODULE.py) and the check that test fails without; each test of
this module was seen failing with its check removed.

R1  Without a token the console binds only to loopback; either token lets it bind beyond.
    Server security      test_console_refuses_to_bind_beyond_loopback_without_a_token
           here          test_the_application_token_alone_lets_the_console_bind_beyond_loopback
    Check  security.check_bind, given either token by server.serving
R2  A token is 16 to 512 characters.
    Start  here          test_tokens_are_16_to_512_characters
    Check  the lengths of Settings.console_token and Settings.api_token
R3  Without a token, only loopback Host names are answered (DNS rebinding).
    API    api_security  test_other_origins_and_hosts_are_refused_unless_allowed
    Pages  security      test_console_without_a_token_answers_only_to_loopback_host_names
    Check  Authenticate (its first branch)
R4  Without a token everyone is `local` and may do everything, resolve included.
    API    api           test_api_resolves_an_unknown_side_effect
    Forms  actions       test_console_resolve_decides_an_unknown_side_effect_and_refuses_bad_json
    Check  Guard.caller (no token required)
R5  The console token set, a request without a right token is refused: 401 (JSON, events, a
    POST), a page redirects to /login.
    API    api_security  test_tokens_decide_who_may_do_what_and_name_the_operator
    Pages  security      test_console_with_a_token_refuses_requests_without_it
    Check  Guard.caller (None), Authenticate._refuse
R6  The application token alone, likewise.
    API    here          test_the_application_token_alone_guards_the_api
    Pages  here          test_the_application_token_alone_guards_the_pages
    Check  Guard.required
R7  The console token (bearer) may do everything, resolve included, as its name.
    API    api_security  test_tokens_decide_who_may_do_what_and_name_the_operator
    Forms  security      test_console_bearer_token_and_login_cookie_act_as_the_token_name
    Check  Guard.caller (the console token is the `console` role)
R8  The login cookie acts as the console token, resolve included, as its name.
    API    here          test_the_login_cookie_resolves_over_the_api
    Forms  here          test_the_login_cookie_resolves_in_a_form
    Check  Guard.caller (the cookie is the `console` role)
R9  The login form takes the console token, never the application token (which alone lets
    nobody sign in).
    Pages  here          test_the_login_form_takes_the_console_token_only
    Check  Guard.password_matches
R10 The login cookie is HttpOnly, SameSite=Strict, an HMAC of the token, and Secure over https.
    Pages  security      test_console_bearer_token_and_login_cookie_act_as_the_token_name
           here          test_the_login_cookie_is_secure_over_https (Secure)
    Check  login.sign_in
R11 Signing in goes on only to a same-site path (next), never to another origin.
    Pages  here          test_the_login_form_goes_on_only_to_a_same_site_path
    Check  web.safe_next
R12 The application token reads, submits and decides, as its name.
    API    api_security  test_tokens_decide_who_may_do_what_and_name_the_operator
    Forms  here          test_the_application_token_reads_submits_and_stops_in_the_pages
    Check  Guard.caller (the application token is the `app` role)
R13 The application token takes every decision but resolve; the console token every one.
    Both   here          test_only_the_console_role_may_resolve
    Check  Caller.refusal, which both surfaces ask (R14)
R14 The application token may not resolve: 403, nothing written.
    API    api_security  test_tokens_decide_who_may_do_what_and_name_the_operator
    Forms  here          test_the_application_token_cannot_resolve_in_a_form
    Check  api_submissions.decide and actions.decide asking Caller.refusal
R15 A console POST (but /login) needs a CSRF token: else 403, nothing done. The API needs none:
    it takes JSON bodies only (415 for a form), which another site cannot send unasked (R17).
    Forms  security      test_console_refuses_a_post_without_its_csrf_token
    API    api_hostile   test_api_refuses_other_content_types_and_oversized_bodies
    Check  Authenticate (CSRF); api_requests.read_body (JSON only)
R16 ... and the CSRF token is its own operator's: another operator's is refused.
    Forms  here          test_a_csrf_token_is_its_operators_alone
    Check  Guard.csrf_token (an HMAC of the operator's name)
R17 Another site's Origin is refused unless allowed (the pages have R15 instead).
    API    api_security  test_other_origins_and_hosts_are_refused_unless_allowed
    Check  Authenticate._origin_allowed
R18 An allowed origin gets CORS headers, never with credentials (the login cookie).
    API    here          test_an_allowed_origin_gets_no_credentials
    Check  create_app's CORSMiddleware (no allow_credentials)
R19 A body over the limit gets 413, unread.
    API    api_hostile   test_api_refuses_other_content_types_and_oversized_bodies
    Forms  security      test_console_refuses_a_body_over_its_limit
    Check  BodyLimit

Tokens are compared in constant time (``hmac.compare_digest``), which no test observes.

The module serves two consoles once, on a ledger of its own: one with both tokens and an allowed
origin, one with the application token alone; each test uses threads of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, get_args

import asyncpg
import httpx
import pydantic
import pytest

from tests.console.api import error_of, post
from tests.console.conftest import serve
from tests.console.helpers import csrf_of, settled_state
from tests.helpers.cli import unknown_side_effect
from tests.helpers.stack import TEMPLATE, StackEndpoints, quick_settings
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.console.security import SESSION_COOKIE, Caller
from threadwarden.console.web import Decision
from threadwarden.ledger.pool import create_pool

pytestmark = pytest.mark.xdist_group("roles")  # one worker serves the module's consoles once

CONSOLE_TOKEN = "console-token-0123456789abcdef"
APP_TOKEN = "app-token-0123456789abcdef012"
ORIGIN = "https://chat.example.com"


@dataclass(frozen=True)
class Consoles:
    """The module's ledger and its consoles."""

    pool: asyncpg.Pool[Any]
    client: ThreadwardenClient
    settings: Settings
    both: str
    """Both tokens (``alice`` and ``web-app``) and `ORIGIN` allowed: its URL."""
    app_alone: str
    """The application token alone: its URL."""


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _session(url: str, token: str | None = None) -> httpx.AsyncClient:
    """An HTTP client on the console at ``url``, sending ``token`` if given."""
    return httpx.AsyncClient(base_url=url, timeout=30, headers=_bearer(token) if token else None)


@pytest.fixture(scope="module")
async def consoles(
    postgres: StackEndpoints, temporal: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Consoles]:
    """The module's two consoles on a ledger and task queue of its own (no worker)."""
    database_url = await postgres.new_database("t", TEMPLATE)
    settings = quick_settings(tmp_path_factory.mktemp("roles") / "tw")
    pool = await create_pool(database_url, max_size=5)
    connections = Connections(database_url=database_url, temporal_address=temporal)
    try:
        async with (
            ThreadwardenClient.connect(settings, connections) as client,
            serve(
                client,
                pool,
                settings,
                console_token=CONSOLE_TOKEN,
                console_token_name="alice",
                api_token=APP_TOKEN,
                api_token_name="web-app",
                api_allowed_origins=[ORIGIN],
            ) as both,
            serve(client, pool, settings, api_token=APP_TOKEN) as app_alone,
        ):
            yield Consoles(pool, client, settings, both, app_alone)
    finally:
        await pool.close()


@pytest.fixture
async def anonymous(consoles: Consoles) -> AsyncIterator[httpx.AsyncClient]:
    """A client on the console with both tokens, sending no credentials."""
    async with _session(consoles.both) as http:
        yield http


@pytest.fixture
async def app(consoles: Consoles) -> AsyncIterator[httpx.AsyncClient]:
    """A client on the console with both tokens, sending the application token."""
    async with _session(consoles.both, APP_TOKEN) as http:
        yield http


@pytest.fixture
async def alice(consoles: Consoles) -> AsyncIterator[httpx.AsyncClient]:
    """A client on the console with both tokens, sending the console token (``alice``)."""
    async with _session(consoles.both, CONSOLE_TOKEN) as http:
        yield http


@pytest.fixture
async def signed_in(anonymous: httpx.AsyncClient) -> httpx.AsyncClient:
    """The anonymous client once signed in with the console token (it keeps the cookie)."""
    signed = await anonymous.post("/login", data={"token": CONSOLE_TOKEN, "next": "/inbox"})
    assert signed.status_code == 303 and SESSION_COOKIE in anonymous.cookies
    return anonymous


async def _resolution(pool: asyncpg.Pool[Any], submission_id: str) -> tuple[str, str] | None:
    """The outcome and the operator of the submission's ``tool-resolution`` record (None:
    nobody resolved it)."""
    body = await pool.fetchval(
        "SELECT body FROM threadwarden.records WHERE submission_id = $1"
        " AND kind = 'tool-resolution'",
        submission_id,
    )
    return None if body is None else (body["outcome"], body["operator"])


async def _submissions(pool: asyncpg.Pool[Any], thread_id: str) -> int:
    """How many submissions the thread has (0: none was admitted)."""
    count: int = await pool.fetchval(
        "SELECT count(*) FROM threadwarden.submissions WHERE thread_id = $1", thread_id
    )
    return count


def test_only_the_console_role_may_resolve() -> None:
    decisions = get_args(Decision)
    console, app = Caller("alice", "console"), Caller("web-app", "app")
    assert [d for d in decisions if console.refusal(d) is not None] == []
    assert [d for d in decisions if app.refusal(d) is not None] == ["resolve"]
    assert "console token" in (app.refusal("resolve") or "")


@pytest.mark.parametrize("token", ["console_token", "api_token"])
@pytest.mark.parametrize("length", [15, 513])
def test_tokens_are_16_to_512_characters(token: str, length: int) -> None:
    with pytest.raises(pydantic.ValidationError) as refused:
        Settings.model_validate({token: "x" * length})
    [error] = refused.value.errors()
    assert error["loc"] == (token,)
    Settings.model_validate({token: "x" * (16 if length < 16 else 512)})


async def test_the_application_token_alone_lets_the_console_bind_beyond_loopback(
    consoles: Consoles,
) -> None:
    beyond = serve(
        consoles.client,
        consoles.pool,
        consoles.settings,
        console_address="0.0.0.0:0",
        api_token=APP_TOKEN,
    )
    async with beyond as url, _session(url) as http:
        assert (await http.get("/v1/inbox", headers=_bearer(APP_TOKEN))).status_code == 200


async def test_the_application_token_alone_guards_the_api(consoles: Consoles, ids: str) -> None:
    async with _session(consoles.app_alone) as http:
        refused = await http.get("/v1/inbox")
        assert refused.status_code == 401 and error_of(refused)["code"] == "unauthorized"
        body = {"agent": "scripted", "input": [{"say": "x"}]}
        posted = await post(http, f"/v1/threads/{ids}/submissions", body)
        assert posted.status_code == 401
        assert await _submissions(consoles.pool, ids) == 0
        assert (await http.get("/v1/inbox", headers=_bearer(APP_TOKEN))).status_code == 200


async def test_the_application_token_alone_guards_the_pages(consoles: Consoles) -> None:
    async with _session(consoles.app_alone) as http:
        page = await http.get("/inbox")
        assert page.status_code == 303 and page.headers["location"] == "/login?next=/inbox"
        assert (await http.get("/inbox", params={"format": "json"})).status_code == 401
        assert (await http.get("/inbox", headers=_bearer(APP_TOKEN))).status_code == 200


async def test_the_login_form_takes_the_console_token_only(consoles: Consoles) -> None:
    for url in (consoles.both, consoles.app_alone):
        async with _session(url) as http:
            refused = await http.post("/login", data={"token": APP_TOKEN, "next": "/inbox"})
            assert refused.status_code == 401 and "set-cookie" not in refused.headers, url
            assert (await http.get("/inbox")).status_code == 303  # still signed out


async def test_the_login_cookie_is_secure_over_https(anonymous: httpx.AsyncClient) -> None:
    fields = {"token": CONSOLE_TOKEN, "next": "/"}
    plain = await anonymous.post("/login", data=fields)
    assert plain.status_code == 303 and "secure" not in plain.headers["set-cookie"].lower()
    # As a TLS-terminating proxy on this machine forwards it (uvicorn trusts loopback's).
    https = await anonymous.post("/login", data=fields, headers={"x-forwarded-proto": "https"})
    assert https.status_code == 303 and "; secure" in https.headers["set-cookie"].lower()


async def test_the_login_form_goes_on_only_to_a_same_site_path(
    anonymous: httpx.AsyncClient,
) -> None:
    for elsewhere in ("https://evil.example/inbox", "//evil.example/inbox", "/\\evil.example"):
        signed = await anonymous.post("/login", data={"token": CONSOLE_TOKEN, "next": elsewhere})
        assert signed.status_code == 303 and signed.headers["location"] == "/", elsewhere
    page = await anonymous.get("/login", params={"next": "//evil.example/inbox"})
    assert 'value="/"' in page.text and "evil.example" not in page.text


async def test_the_login_cookie_resolves_over_the_api(
    consoles: Consoles, signed_in: httpx.AsyncClient, ids: str
) -> None:
    unknown = await unknown_side_effect(consoles.pool, ids)
    resolved = await post(signed_in, f"/v1/submissions/{unknown}/resolve", {"outcome": "not-run"})
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["operator"] == "alice"
    assert await _resolution(consoles.pool, unknown) == ("not-run", "alice")


async def test_the_login_cookie_resolves_in_a_form(
    consoles: Consoles, signed_in: httpx.AsyncClient, ids: str
) -> None:
    unknown = await unknown_side_effect(consoles.pool, ids)
    fields = {"csrf_token": await csrf_of(signed_in), "outcome": "not-run"}
    resolved = await signed_in.post(f"/submissions/{unknown}/resolve", data=fields)
    assert resolved.status_code == 303, resolved.text
    assert await _resolution(consoles.pool, unknown) == ("not-run", "alice")


async def test_the_application_token_reads_submits_and_stops_in_the_pages(
    consoles: Consoles, app: httpx.AsyncClient, ids: str
) -> None:
    page = await app.get("/inbox")
    assert page.status_code == 200 and "Sign out (web-app)" in page.text
    token = await csrf_of(app, "/")
    made = await app.post(
        "/submit",
        data={"csrf_token": token, "thread": ids, "agent": "scripted", "input": '[{"say": "x"}]'},
    )
    assert made.status_code == 303, made.text
    [view] = (await consoles.client.thread_status(ids)).submissions
    stopped = await app.post(f"/submissions/{view.submission_id}/abort", data={"csrf_token": token})
    assert stopped.status_code == 303, stopped.text
    [view] = (await consoles.client.thread_status(ids)).submissions
    assert (view.outcome, view.reason) == ("aborted", "aborted by an operator (web-app)")


async def test_the_application_token_cannot_resolve_in_a_form(
    consoles: Consoles, app: httpx.AsyncClient, ids: str
) -> None:
    unknown = await unknown_side_effect(consoles.pool, ids)
    path = f"/submissions/{unknown}/resolve"
    fields = {"csrf_token": await csrf_of(app), "outcome": "not-run"}
    form = await app.post(path, data=fields)
    assert form.status_code == 403
    message = "resolving an unknown side effect needs the console token"
    assert f"threadwarden: error: {message}" in form.text
    as_json = await app.post(path, params={"format": "json"}, data=fields)
    assert as_json.status_code == 403
    assert as_json.json() == {"error": message, "field": "token", "code": "forbidden"}
    assert await settled_state(consoles.client, ids, unknown) == "unknown"
    assert await _resolution(consoles.pool, unknown) is None


async def test_a_csrf_token_is_its_operators_alone(
    consoles: Consoles, app: httpx.AsyncClient, alice: httpx.AsyncClient, ids: str
) -> None:
    apps, alices = await csrf_of(app, "/"), await csrf_of(alice, "/")
    fields = {"thread": ids, "agent": "scripted", "input": '[{"say": "x"}]'}
    for sender, token in ((alice, apps), (app, alices)):
        crossed = await sender.post("/submit", data={**fields, "csrf_token": token})
        assert crossed.status_code == 403 and "CSRF" in crossed.text
    assert await _submissions(consoles.pool, ids) == 0


async def test_an_allowed_origin_gets_no_credentials(app: httpx.AsyncClient) -> None:
    preflight = await app.options(
        "/v1/inbox",
        headers={
            "origin": ORIGIN,
            "access-control-request-method": "GET",
            "access-control-request-headers": "authorization",
        },
    )
    read = await app.get("/v1/inbox", headers={"origin": ORIGIN})
    for answer in (preflight, read):
        assert answer.status_code == 200, answer.text
        assert answer.headers["access-control-allow-origin"] == ORIGIN
        assert "access-control-allow-credentials" not in answer.headers
