"""Hostile input to the HTTP API under /v1: malformed ids in paths, bodies that are not JSON
objects or not the request's shape, oversized and over-deep bodies, unstorable strings and
numbers, wrong content types, malformed headers and query parameters, wrong methods and unknown
paths. Each must be refused with the API's JSON error document (400, 404, 405, 413 or 415:
never a 500, a plain-text page or a stream) and write nothing to the ledger.

No worker runs: the one admitted submission stays as it is, so the ledger changes only if a
request writes. Each test walks a table of cases and reports every case that misbehaves (its
captured output lists every case with the status it got)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
import pytest

from tests.console.api import error_of, ledger_snapshot
from threadwarden.client.client import ThreadwardenClient

CODES = {
    400: "invalid_input",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
}
"""The error code each refusal's status comes with."""
BIG = 3 * 1024 * 1024
"""Far beyond the default ``console_max_body_bytes`` (128 KiB)."""
DEEP = "[" * 5000 + "]" * 5000
HUGE_INT = "1" + "0" * 5000
JSON_TYPE: Mapping[str, str] = {"content-type": "application/json"}

Content = bytes | Callable[[], AsyncIterator[bytes]] | None


@dataclass(frozen=True)
class Case:
    """One hostile request: ``{T}`` and ``{S}`` in ``path`` are the thread and submission."""

    name: str
    method: str
    path: str
    status: int
    content: Content = None
    headers: Mapping[str, str] = field(default_factory=dict)
    raw: bool = False
    """Send ``path`` exactly (httpx would otherwise resolve ``..`` itself)."""


@dataclass(frozen=True)
class Target:
    thread_id: str
    submission_id: str


@pytest.fixture
async def target(client: ThreadwardenClient, ids: str) -> Target:
    """A thread with one admitted submission (nothing runs it: no worker)."""
    receipt = await client.submit(ids, agent_id="scripted", input=[{"approval": "x"}])
    return Target(ids, receipt.submission_id)


def _json(text: str) -> bytes:
    return text.encode()


def _chunked(size: int, prefix: bytes = b'{"agent": "scripted", "input": "') -> Content:
    """A body of ``size`` bytes sent chunked (an async generator: no Content-Length)."""

    async def chunks() -> AsyncIterator[bytes]:
        yield prefix
        sent = len(prefix)
        while sent < size:
            piece = min(65_536, size - sent)
            yield b"a" * piece
            sent += piece

    return chunks


async def _send(http: httpx.AsyncClient, case: Case, target: Target) -> httpx.Response:
    path = case.path.replace("{T}", target.thread_id).replace("{S}", target.submission_id)
    if case.raw:
        return await _send_raw(http.base_url, case, path)
    content = case.content() if callable(case.content) else case.content
    headers = [(name.encode(), value.encode("latin-1")) for name, value in case.headers.items()]
    request = http.build_request(case.method, path, content=content, headers=headers)
    response = await http.send(request, stream=True)
    try:
        if not _streams(response):
            await response.aread()  # a stream would never end: its headers are enough
    finally:
        await response.aclose()
    return response


async def _send_raw(base: httpx.URL, case: Case, path: str) -> httpx.Response:
    """``case`` over a bare connection, its path as written (httpx resolves ``..`` itself)."""
    assert case.content is None or isinstance(case.content, bytes), case
    body = case.content or b""
    head = [f"{case.method} {path} HTTP/1.1", f"host: {base.netloc.decode()}"]
    head += [f"{name}: {value}" for name, value in case.headers.items()]
    head += [f"content-length: {len(body)}", "connection: close"]
    reader, writer = await asyncio.open_connection(base.host, base.port)
    try:
        writer.write("\r\n".join(head).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 30)  # the server closes: connection close
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    header_block, _, content = rest.partition(b"\r\n\r\n")
    lines = [line.partition(b":") for line in header_block.split(b"\r\n") if line]
    headers = [(name, value.strip()) for name, _, value in lines]
    return httpx.Response(int(status_line.split()[1]), headers=headers, content=content)


def _streams(response: httpx.Response) -> bool:
    media: str = response.headers.get("content-type", "")
    return media.startswith("text/event-stream")


def _text(response: httpx.Response) -> str:
    return "(an event stream)" if _streams(response) else response.text[:300]


def _problem(case: Case, response: httpx.Response) -> str | None:
    """What is wrong with ``response`` as the refusal of ``case`` (None: nothing)."""
    if response.status_code != case.status:
        return f"status {response.status_code}, expected {case.status}: {_text(response)!r}"
    try:
        error = error_of(response)
    except (AssertionError, ValueError, KeyError) as failed:
        return f"not the API's error document ({failed}): {_text(response)!r}"
    if error["code"] != CODES[case.status]:
        return f"code {error['code']!r}, expected {CODES[case.status]!r}: {error}"
    return None


async def _refused(
    http: httpx.AsyncClient, pool: asyncpg.Pool[Any], target: Target, cases: list[Case]
) -> None:
    """Send every case; fail naming each that was not refused properly or that wrote."""
    problems: list[str] = []
    before = await ledger_snapshot(pool)
    for case in cases:
        try:
            response = await _send(http, case, target)
        except httpx.HTTPError as error:  # e.g. the connection closed before any answer
            problems.append(f"{case.name}: no answer, expected {case.status}: {error!r}")
            print(f"{case.name}: no answer ({error!r})")
        else:
            problem = _problem(case, response)
            print(f"{case.name}: {response.status_code} {_text(response)[:160]}")
            if problem is not None:
                problems.append(f"{case.name}: {problem}")
        after = await ledger_snapshot(pool)
        if after != before:
            problems.append(f"{case.name}: the ledger changed")
            before = after
    assert not problems, f"{len(problems)} of {len(cases)} cases:\n" + "\n".join(problems)


BAD_IDS: list[tuple[str, str, int, bool]] = [
    ("129 characters", "a" * 129, 400, False),
    ("5,000 characters", "a" * 5000, 400, False),
    ("a space", "a%20b", 400, False),
    ("unicode", "%C3%A9t%C3%A9", 400, False),
    ("an emoji", "%F0%9F%98%80", 400, False),
    ("NUL", "%00", 400, False),
    ("NUL inside", "a%00b", 400, False),
    ("invalid UTF-8 %ff", "%ff", 400, False),
    ("an encoded surrogate", "%ED%A0%80", 400, False),
    ("markup", "%3Cscript%3E", 400, False),
    ("a backslash", "a%5Cb", 400, False),
    ("../x", "../x", 404, True),
    ("..%2Fx", "..%2Fx", 404, False),
    ("an encoded slash", "%2F", 404, False),
    ("empty", "", 404, False),
]
"""Name, the id as it stands in the path, the status, whether the path is sent as written."""
ID_ENDPOINTS: list[tuple[str, str, bytes | None]] = [
    ("GET", "/v1/threads/{id}", None),
    ("GET", "/v1/threads/{id}/events", None),
    ("GET", "/v1/threads/{id}/turns", None),
    ("POST", "/v1/threads/{id}/submissions", b'{"agent": "scripted", "input": [{"say": "x"}]}'),
    ("GET", "/v1/submissions/{id}", None),
    ("GET", "/v1/submissions/{id}/result?wait=0", None),
    ("POST", "/v1/submissions/{id}/approve", b"{}"),
    ("POST", "/v1/submissions/{id}/abort", b"{}"),
]
"""Every endpoint with an id in its path; the bodies are valid (only the id is wrong)."""


async def test_api_refuses_malformed_ids_in_paths(
    http: httpx.AsyncClient, pool: asyncpg.Pool[Any], target: Target
) -> None:
    cases = [
        Case(
            f"{method} {path} with id {name}",
            method,
            path.replace("{id}", value),
            status,
            body,
            JSON_TYPE if body is not None else {},
            raw=raw,
        )
        for name, value, status, raw in BAD_IDS
        for method, path, body in ID_ENDPOINTS
    ]
    await _refused(http, pool, target, cases)


SUBMIT = "/v1/threads/{T}/submissions"
APPROVE = "/v1/submissions/{S}/approve"
DENY = "/v1/submissions/{S}/deny"
ANSWER = "/v1/submissions/{S}/answer"
RESOLVE = "/v1/submissions/{S}/resolve"
ABORT = "/v1/submissions/{S}/abort"
ANY_BODY = [
    ("not JSON", b"not json"),
    ("empty", b""),
    ("truncated", b'{"agent": "scripted"'),
    ("single quotes", b"{'agent': 'scripted'}"),
    ("a trailing comma", b'{"agent": "scripted", "input": [],}'),
    ("a NUL byte", b"\x00"),
    ("an array", b"[]"),
    ("an array of the object", b'[{"agent": "scripted", "input": []}]'),
    ("a string", b'"scripted"'),
    ("null", b"null"),
    ("a number", b"42"),
    ("true", b"true"),
    ("NaN", b"NaN"),
    ("5,000-deep arrays", _json(DEEP)),
    ("5,000-deep objects", _json('{"a": ' * 5000 + "1" + "}" * 5000)),
    ("a 5,001-digit integer", _json(HUGE_INT)),
    ("invalid UTF-8", b'{"agent": "\xff\xfe"}'),
    ("CESU-8 surrogate bytes", b'{"agent": "\xed\xa0\x80"}'),
    ("a NUL-named key", _json('{"\\u0000": 1}')),
    ("a lone-surrogate key", _json('{"\\udc00": 1}')),
    ("UTF-16", '{"agent": "scripted", "input": []}'.encode("utf-16")),
]
"""Bodies every POST endpoint refuses (400)."""
SHAPES = [
    (SUBMIT, "an unknown field", '{"agent": "scripted", "input": [], "extra": 1}'),
    (SUBMIT, "agent 5", '{"agent": 5, "input": []}'),
    (SUBMIT, "agent null", '{"agent": null, "input": []}'),
    (SUBMIT, "agent a list", '{"agent": ["scripted"], "input": []}'),
    (SUBMIT, "agent not an id", '{"agent": "a b", "input": []}'),
    (SUBMIT, "agent with NUL", '{"agent": "scripted\\u0000", "input": []}'),
    (SUBMIT, "agent a lone surrogate", '{"agent": "\\ud800", "input": []}'),
    (SUBMIT, "agent NaN", '{"agent": NaN, "input": []}'),
    (SUBMIT, "agent a 5,001-digit integer", f'{{"agent": {HUGE_INT}, "input": []}}'),
    (SUBMIT, "no input", '{"agent": "scripted"}'),
    (SUBMIT, "no agent", '{"input": []}'),
    (SUBMIT, "host 5", '{"agent": "scripted", "input": [], "host": 5}'),
    (SUBMIT, "host not an id", '{"agent": "scripted", "input": [], "host": "../h"}'),
    (SUBMIT, "agent_digest a list", '{"agent": "scripted", "input": [], "agent_digest": []}'),
    (SUBMIT, "if_busy unknown", '{"agent": "scripted", "input": [], "if_busy": "maybe"}'),
    (SUBMIT, "if_busy 1", '{"agent": "scripted", "input": [], "if_busy": 1}'),
    (SUBMIT, "input 5,000 deep", f'{{"agent": "scripted", "input": {DEEP}}}'),
    (SUBMIT, "input 100 deep", '{"agent": "scripted", "input": ' + "[" * 100 + "]" * 100 + "}"),
    (SUBMIT, "input with NUL", '{"agent": "scripted", "input": "a\\u0000b"}'),
    (SUBMIT, "input a lone surrogate", '{"agent": "scripted", "input": ["\\ud800"]}'),
    (SUBMIT, "input a lone low surrogate", '{"agent": "scripted", "input": {"a": "x\\udfff"}}'),
    (SUBMIT, "input a 5,001-digit integer", f'{{"agent": "scripted", "input": [{HUGE_INT}]}}'),
    (SUBMIT, "input NaN", '{"agent": "scripted", "input": NaN}'),
    (SUBMIT, "input Infinity", '{"agent": "scripted", "input": [Infinity]}'),
    (SUBMIT, "input -Infinity", '{"agent": "scripted", "input": {"x": -Infinity}}'),
    (SUBMIT, "input 1e999", '{"agent": "scripted", "input": [1e999]}'),
    (SUBMIT, "input 100 KB", json.dumps({"agent": "scripted", "input": "a" * 100_000})),
    (APPROVE, "an unknown field", '{"force": true}'),
    (APPROVE, "a reason", '{"reason": "x"}'),
    (ABORT, "an unknown field", '{"now": true}'),
    (DENY, "an unknown field", '{"reason": "x", "why": 1}'),
    (DENY, "reason 5", '{"reason": 5}'),
    (DENY, "reason with NUL", '{"reason": "a\\u0000"}'),
    (DENY, "reason a lone surrogate", '{"reason": "\\ud800"}'),
    (DENY, "reason NaN", '{"reason": NaN}'),
    (ANSWER, "no value", "{}"),
    (ANSWER, "an unknown field", '{"value": 1, "x": 2}'),
    (ANSWER, "value 5,000 deep", f'{{"value": {DEEP}}}'),
    (ANSWER, "value with NUL", '{"value": "\\u0000"}'),
    (ANSWER, "value NaN", '{"value": NaN}'),
    (RESOLVE, "outcome 5", '{"outcome": 5}'),
    (RESOLVE, "outcome unknown", '{"outcome": "maybe"}'),
    (RESOLVE, "no outcome", "{}"),
    (RESOLVE, "an unknown field", '{"outcome": "ran", "extra": 1}'),
]
"""Bodies of the wrong shape for one endpoint (400)."""


async def test_api_refuses_bodies_that_are_not_a_valid_json_object(
    http: httpx.AsyncClient, pool: asyncpg.Pool[Any], target: Target
) -> None:
    cases = [
        Case(f"POST {path} {name}", "POST", path, 400, body, JSON_TYPE)
        for path in (SUBMIT, APPROVE, DENY, ANSWER, RESOLVE, ABORT)
        for name, body in ANY_BODY
    ]
    cases += [
        Case(f"POST {p} {name}", "POST", p, 400, _json(b), JSON_TYPE) for p, name, b in SHAPES
    ]
    await _refused(http, pool, target, cases)


SUBMIT_BODY = b'{"agent": "scripted", "input": [{"say": "x"}]}'
MEDIA_TYPES: list[tuple[str, Mapping[str, str]]] = [
    ("text/plain", {"content-type": "text/plain"}),
    ("a form", {"content-type": "application/x-www-form-urlencoded"}),
    ("multipart", {"content-type": "multipart/form-data; boundary=x"}),
    ("no content type", {}),
    ("application/json-patch+json", {"content-type": "application/json-patch+json"}),
    ("application/jsonx", {"content-type": "application/jsonx"}),
    ("json", {"content-type": "json"}),
    ("empty", {"content-type": ""}),
]


async def test_api_refuses_other_content_types_and_oversized_bodies(
    http: httpx.AsyncClient, pool: asyncpg.Pool[Any], target: Target
) -> None:
    cases = [
        Case(f"POST {path} as {name}", "POST", path, 415, body, headers)
        for path, body in ((SUBMIT, SUBMIT_BODY), (ABORT, b"{}"), (APPROVE, b"{}"))
        for name, headers in MEDIA_TYPES
    ]
    big = b'{"agent": "scripted", "input": "' + b"a" * BIG + b'"}'
    for path in (SUBMIT, ABORT, DENY):
        cases += [
            Case(f"POST {path} 3 MB with Content-Length", "POST", path, 413, big, JSON_TYPE),
            Case(f"POST {path} 3 MB chunked", "POST", path, 413, _chunked(BIG), JSON_TYPE),
            Case(
                f"POST {path} 128 KiB + 1 chunked",
                "POST",
                path,
                413,
                _chunked(131_073),
                JSON_TYPE,
            ),
        ]
    cases += [
        Case(
            "POST submit 3 MB as text/plain",
            "POST",
            SUBMIT,
            413,
            big,
            {"content-type": "text/plain"},
        ),
        Case(
            "POST submit 3 MB chunked as text/plain (the type is refused first)",
            "POST",
            SUBMIT,
            415,
            _chunked(BIG),
            {"content-type": "text/plain"},
        ),
        Case("GET thread with a 3 MB body", "GET", "/v1/threads/{T}", 413, big, JSON_TYPE),
    ]
    await _refused(http, pool, target, cases)


def _submit_with(name: str, headers: Mapping[str, str]) -> Case:
    return Case(
        f"POST submit with {name}", "POST", SUBMIT, 400, SUBMIT_BODY, {**JSON_TYPE, **headers}
    )


def _get(name: str, path: str, status: int = 400, **headers: str) -> Case:
    extra = {key.replace("_", "-"): value for key, value in headers.items()}
    return Case(f"GET {path} {name}", "GET", path, status, None, extra)


EVENTS = "/v1/threads/{T}/events"
RESULT = "/v1/submissions/{S}/result"


async def test_api_refuses_malformed_headers_and_query_parameters(
    http: httpx.AsyncClient, pool: asyncpg.Pool[Any], target: Target
) -> None:
    cases = [
        _submit_with("an Idempotency-Key of 129 characters", {"idempotency-key": "k" * 129}),
        _submit_with("an Idempotency-Key with spaces", {"idempotency-key": "a key"}),
        _submit_with("an empty Idempotency-Key", {"idempotency-key": ""}),
        _submit_with("an Idempotency-Key of latin-1 bytes", {"idempotency-key": "k\u00e9y"}),
        _submit_with("an Idempotency-Key ../x", {"idempotency-key": "../x"}),
        _get("Last-Event-ID abc", EVENTS, last_event_id="abc"),
        _get("Last-Event-ID -1", EVENTS, last_event_id="-1"),
        _get("Last-Event-ID of 30 digits", EVENTS, last_event_id="1" * 30),
        _get("Last-Event-ID 1.5", EVENTS, last_event_id="1.5"),
        _get(
            "Last-Event-ID ² (a digit to str.isdigit, not to int)", EVENTS, last_event_id="\u00b2"
        ),
        _get("", f"{EVENTS}?after=x"),
        _get("", f"{EVENTS}?after=-1"),
        _get("", f"{EVENTS}?after={'9' * 30}"),
        _get("", f"{EVENTS}?after=1e3"),
        _get("(superscript two)", f"{EVENTS}?after=%C2%B2"),
    ]
    for wait in ("-1", "NaN", "nan", "inf", "1e9", "301", "abc", "", "1e400"):
        cases.append(_get("", f"{RESULT}?wait={wait}"))
    for limit in ("0", "abc", "100000", "1001", "-1", "", "1.5"):
        cases.append(_get("", f"/v1/inbox?limit={limit}"))
    cases.append(_get("(superscript two)", "/v1/inbox?limit=%C2%B2"))
    await _refused(http, pool, target, cases)


async def test_api_refuses_other_methods_and_unknown_paths(
    http: httpx.AsyncClient, pool: asyncpg.Pool[Any], target: Target
) -> None:
    cases = [
        Case("PUT submissions", "PUT", SUBMIT, 405, SUBMIT_BODY, JSON_TYPE),
        Case("DELETE submissions", "DELETE", SUBMIT, 405),
        Case("GET submissions", "GET", SUBMIT, 405),
        Case("DELETE a submission", "DELETE", "/v1/submissions/{S}", 405),
        Case("PUT a submission", "PUT", "/v1/submissions/{S}", 405, b"{}", JSON_TYPE),
        Case("PATCH a thread", "PATCH", "/v1/threads/{T}", 405, b"{}", JSON_TYPE),
        Case("POST a thread", "POST", "/v1/threads/{T}", 405, b"{}", JSON_TYPE),
        Case("DELETE a thread", "DELETE", "/v1/threads/{T}", 405),
        Case("GET abort", "GET", ABORT, 405),
        Case("PUT abort", "PUT", ABORT, 405, b"{}", JSON_TYPE),
        Case("DELETE approve", "DELETE", APPROVE, 405),
        Case("POST result", "POST", RESULT, 405, b"{}", JSON_TYPE),
        Case("POST events", "POST", EVENTS, 405, b"{}", JSON_TYPE),
        Case("POST inbox", "POST", "/v1/inbox", 405, b"{}", JSON_TYPE),
        Case("POST openapi.json", "POST", "/v1/openapi.json", 405, b"{}", JSON_TYPE),
        Case("OPTIONS a thread (no CORS origins)", "OPTIONS", "/v1/threads/{T}", 405),
        Case("GET /v1/", "GET", "/v1/", 404),
        Case("GET /v1/nope", "GET", "/v1/nope", 404),
        Case("GET /v1/threads", "GET", "/v1/threads", 404),
        Case("GET /v1/submissions", "GET", "/v1/submissions", 404),
        Case("GET /v1/openapi.yaml", "GET", "/v1/openapi.yaml", 404),
        Case("POST cancel", "POST", "/v1/submissions/{S}/cancel", 404, b"{}", JSON_TYPE),
        Case("POST a nested submission", "POST", f"{SUBMIT}/{{S}}", 404, b"{}", JSON_TYPE),
        Case("GET /v1/threads/{T}/nope", "GET", "/v1/threads/{T}/nope", 404),
        Case("GET /v1/v1/inbox", "GET", "/v1/v1/inbox", 404),
        Case("GET /v1/../v1/inbox/x", "GET", "/v1/../v1/inbox/x", 404, raw=True),
        Case("POST //v1 submissions", "POST", "/v1//threads/{T}/submissions", 404),
    ]
    await _refused(http, pool, target, cases)
