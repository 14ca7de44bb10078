"""How the HTTP API's handlers read a request and answer it: a JSON object body checked against
its model (`read_body`), an id from the path (`path_id`), a JSON answer (`reply`), and every
refusal as the API's error document (`ApiError`, `refusal`, `handled`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from threadwarden.console.security import BodyTooLarge, is_number
from threadwarden.console.web import api_error, console_of, error_status
from threadwarden.errors import (
    InvalidInput,
    NotFound,
    PoolExhausted,
    ThreadwardenError,
    field_of,
)
from threadwarden.validation import MAX_JSON_DEPTH, check_json_tree, validate_id

JSON = "application/json"
Body = TypeVar("Body", bound=BaseModel)


class ApiError(Exception):
    """A refusal of the API, answered as its error document."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field

    def response(self) -> Response:
        return api_error(self.status, self.code, str(self), self.field)


API_FIELD = {
    "thread": "thread_id",
    "submission": "submission_id",
    "idempotency_key": "Idempotency-Key",
}
"""The API's name of the field a refusal is about (`field_of`), where it is not the CLI's."""


def refusal(error: ThreadwardenError) -> ApiError:
    """A threadwarden error as the API's: its status and stable code as the console's forms
    answer them (`error_status`), and its field; an overloaded pool is 503 (retry later)."""
    if isinstance(error, PoolExhausted):
        return ApiError(503, "unavailable", str(error))
    status, code = error_status(error)
    named = field_of(error)
    field = named if isinstance(error, InvalidInput) else API_FIELD.get(named or "", named)
    if isinstance(error, NotFound):  # "thread: no thread 'x'": the path's thread_id
        subject = str(error).partition(":")[0]
        field = f"{subject}_id" if subject else None
    return ApiError(status, code, str(error), field)


def reply(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """``value`` as a JSON answer (datetimes ISO 8601)."""
    return JSONResponse(json.loads(json.dumps(value, default=str)), status, headers=headers)


async def read_body(request: Request, model: type[Body]) -> Body:
    """The request's JSON object body as ``model``, or an `ApiError` naming what is wrong."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != JSON:
        raise ApiError(415, "unsupported_media_type", f"expected {JSON}", "Content-Type")
    try:
        raw = await request.body()
    except BodyTooLarge as error:  # a chunked body past the limit (`BodyLimit`)
        limit = console_of(request).settings.console_max_body_bytes
        message = f"request body larger than {limit} bytes"
        raise ApiError(413, "too_large", message, "body") from error
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ApiError(400, "invalid_input", "body: expected UTF-8 JSON", "body") from error
    except RecursionError as error:
        raise ApiError(400, "invalid_input", "body: nested too deeply", "body") from error
    except ValueError as error:  # JSONDecodeError, or an integer of more than 4,300 digits
        raise ApiError(
            400, "invalid_input", f"body: expected JSON ({error})"[:200], "body"
        ) from error
    if not isinstance(value, dict):
        raise ApiError(400, "invalid_input", "body: expected a JSON object", "body")
    try:
        check_json_tree("body", value, max_depth=MAX_JSON_DEPTH + 1)
        return model.model_validate(value)
    except InvalidInput as error:
        raise refusal(error) from error
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise ApiError(400, "invalid_input", f"{field}: {first['msg']}", field) from error


def query_count(request: Request, name: str, expected: str) -> int | None:
    """The query parameter ``name`` as a number (None when absent), or an `ApiError` naming it
    and what it ``expected``; the handler's client checks its range."""
    text = request.query_params.get(name)
    if text is None:
        return None
    if not is_number(text, 18):
        raise ApiError(
            400, "invalid_input", f"{name}: expected {expected}, got {text[:40]!r}", name
        )
    return int(text)


def path_id(request: Request, name: str) -> str:
    """The id the path names ``name``, validated (an `ApiError` naming ``name`` if bad)."""
    try:
        return validate_id(name, request.path_params[name])
    except InvalidInput as error:
        raise refusal(error) from error


def handled(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` with its refusals answered as the API's errors."""

    async def handle(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as error:
            return error.response()
        except ThreadwardenError as error:
            return refusal(error).response()

    handle.__name__ = handler.__name__
    handle.__doc__ = handler.__doc__
    return handle
