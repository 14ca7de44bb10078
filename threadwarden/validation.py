"""Input validation shared by the CLI and the client: one-line errors that name the field."""

import json
import re
from typing import Any

from threadwarden.errors import InvalidInput

ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
ID_EXPECTED = "1-128 characters of [A-Za-z0-9._:-]"
MAX_INPUT_BYTES = 65_536
"""Largest accepted submission input, measured as compact UTF-8 JSON."""


def validate_id(field: str, value: object) -> str:
    """Return ``value`` if it is a well-formed id, else raise `InvalidInput` naming ``field``."""
    if not isinstance(value, str) or ID_PATTERN.fullmatch(value) is None:
        raise InvalidInput(field, ID_EXPECTED, value)
    return value


def canonical_json(value: Any) -> str:
    """Compact, key-sorted JSON: the form digests and size limits are computed on."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def validate_input(field: str, value: Any, *, max_bytes: int = MAX_INPUT_BYTES) -> Any:
    """Check that a submission input is JSON-serialisable and within the size limit."""
    try:
        size = len(canonical_json(value).encode())
    except (TypeError, ValueError) as error:
        raise InvalidInput(field, "a JSON value") from error
    if size > max_bytes:
        raise InvalidInput(field, f"at most {max_bytes} bytes of JSON", f"{size} bytes")
    return value


def parse_json_input(field: str, text: str, *, max_bytes: int = MAX_INPUT_BYTES) -> Any:
    """Parse CLI JSON text into a value, with the size limit checked on the raw text too."""
    if len(text.encode()) > max_bytes:
        raise InvalidInput(
            field, f"at most {max_bytes} bytes of JSON", f"{len(text.encode())} bytes"
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidInput(field, f"valid JSON ({error.msg} at char {error.pos})") from error
    return validate_input(field, value, max_bytes=max_bytes)
