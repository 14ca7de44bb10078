"""Input validation shared by the CLI and the client: one-line errors that name the field."""

import json
import math
import re
from typing import Any, Literal

from threadwarden.errors import InvalidInput

ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
ID_EXPECTED = "1-128 characters of [A-Za-z0-9._:-]"
MAX_INPUT_BYTES = 65_536
"""Largest accepted submission input, measured as compact UTF-8 JSON."""
MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted in a JSON input (the top level is 1)."""
MAX_TEXT_CHARS = 1_000
"""Longest free-text operator note (a denial's reason)."""

IfBusy = Literal["enqueue", "reject", "interrupt"]
"""What a submission does when its thread has one that has not settled: queue behind it
(``enqueue``, the default), not be admitted (``reject``: `ThreadBusy`), or ask every earlier
one to abort in the same transaction and run next (``interrupt``)."""
IF_BUSY: tuple[IfBusy, ...] = ("enqueue", "reject", "interrupt")

_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")
"""NUL (Postgres ``text``/``jsonb`` refuse it) and lone surrogates (not UTF-8: non-UTF-8 bytes of
argv, files or stdin arrive as these)."""
_DIGITS = "integers of at most 4300 digits"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
"""Control characters (line breaks, terminal escapes) and lone surrogates: not in one-line text."""


def validate_id(field: str, value: object) -> str:
    """Return ``value`` if it is a well-formed id, else raise `InvalidInput` naming ``field``."""
    if not isinstance(value, str) or ID_PATTERN.fullmatch(value) is None:
        raise InvalidInput(field, ID_EXPECTED, value)
    return value


def validate_text(field: str, value: object, *, max_chars: int = MAX_TEXT_CHARS) -> str:
    """Return ``value`` if it is one line of UTF-8 text of at most ``max_chars`` characters."""
    if not isinstance(value, str):
        raise InvalidInput(field, "a string", type(value).__name__)
    if len(value) > max_chars:
        raise InvalidInput(field, f"at most {max_chars} characters", len(value))
    if _CONTROL.search(value) is not None:
        raise InvalidInput(field, "one line of UTF-8 text without control characters or NUL", value)
    return value


def canonical_json(value: Any) -> str:
    """Compact, key-sorted JSON: the form digests and size limits are computed on."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def check_json_tree(field: str, value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise `InvalidInput` naming the path (``input[2].args.q``) of the first part of ``value``
    that Postgres ``jsonb`` could not store as given: nesting deeper than ``max_depth``, a
    non-string object key, NUL or a non-UTF-8 character in a string, a non-finite number, or a
    value that is not JSON at all. Iterative, so hostile nesting cannot exhaust the stack."""
    stack: list[tuple[str, Any, int]] = [(field, value, 1)]
    while stack:
        path, node, depth = stack.pop()
        if isinstance(node, str):
            _check_string(path, node)
        elif isinstance(node, bool) or node is None or isinstance(node, int):
            continue
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise InvalidInput(path, "a finite number", node)
        elif isinstance(node, dict | list | tuple):
            if depth > max_depth:
                raise InvalidInput(field, f"JSON nested at most {max_depth} levels deep")
            if isinstance(node, dict):
                for key, item in node.items():
                    if not isinstance(key, str):
                        raise InvalidInput(path, "an object with string keys", key)
                    _check_string(f"{path} key", key)
                    stack.append((_member(path, key), item, depth + 1))
            else:
                stack.extend((f"{path}[{i}]", item, depth + 1) for i, item in enumerate(node))
        else:
            raise InvalidInput(path, "a JSON value", type(node).__name__)


def _member(path: str, key: str) -> str:
    if ID_PATTERN.fullmatch(key) is not None:
        return f"{path}.{key}"
    return f"{path}[{key[:20]!r}{'...' if len(key) > 20 else ''}]"


def _check_string(path: str, text: str) -> None:
    found = _UNSTORABLE.search(text)
    if found is not None:
        what = "NUL" if found.group() == "\x00" else "non-UTF-8"
        raise InvalidInput(path, f"UTF-8 text without NUL characters (found {what})")


def validate_input(field: str, value: Any, *, max_bytes: int = MAX_INPUT_BYTES) -> Any:
    """Check that a submission input is storable JSON and within the size limit."""
    check_json_tree(field, value)
    try:
        size = len(canonical_json(value).encode())
    except (TypeError, ValueError) as error:  # e.g. an integer of more than 4,300 digits
        raise InvalidInput(field, f"a JSON value ({_DIGITS})") from error
    if size > max_bytes:
        raise InvalidInput(field, f"at most {max_bytes} bytes of JSON", f"{size} bytes")
    return value


def parse_json_input(field: str, text: str, *, max_bytes: int = MAX_INPUT_BYTES) -> Any:
    """Parse CLI JSON text into a value, with the size limit checked on the raw text too."""
    try:
        size = len(text.encode())
    except UnicodeEncodeError as error:  # non-UTF-8 bytes of argv, a file or stdin
        raise InvalidInput(field, "UTF-8 text (found non-UTF-8 bytes)") from error
    if size > max_bytes:
        raise InvalidInput(field, f"at most {max_bytes} bytes of JSON", f"{size} bytes")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidInput(field, f"valid JSON ({error.msg} at char {error.pos})") from error
    except RecursionError as error:
        raise InvalidInput(field, f"JSON nested at most {MAX_JSON_DEPTH} levels deep") from error
    except ValueError as error:  # an integer of more than 4,300 digits
        raise InvalidInput(field, f"valid JSON ({_DIGITS})") from error
    return validate_input(field, value, max_bytes=max_bytes)


def check_schema(schema: Any) -> dict[str, Any]:
    """Check that ``schema`` is a JSON Schema (an object valid for its draft)."""
    import jsonschema  # only where a question carries a schema

    if not isinstance(schema, dict):
        raise InvalidInput("schema", "a JSON Schema object", schema)
    validate_input("schema", schema)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as error:
        raise InvalidInput("schema", f"a valid JSON Schema ({error.message})") from error
    return schema


def validate_answer(value: Any, schema: dict[str, Any] | None) -> Any:
    """Check an answer: storable JSON, and valid under the question's ``schema`` if any."""
    import jsonschema

    validate_input("value", value)
    if schema is not None:
        errors = sorted(
            jsonschema.validators.validator_for(schema)(schema).iter_errors(value),
            key=lambda e: list(e.path),
        )
        if errors:
            where = "/".join(str(p) for p in errors[0].path)
            at = f" at {where}" if where else ""
            raise InvalidInput(
                "value", f"an answer valid under the question's schema ({errors[0].message}{at})"
            )
    return value
