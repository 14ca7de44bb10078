"""``THREADWARDEN_API_ALLOWED_ORIGINS`` as people write it: one origin, several separated by
commas, or a JSON list; anything else is one line naming the variable and what it expects."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from threadwarden.config.settings import Settings

VARIABLE = "THREADWARDEN_API_ALLOWED_ORIGINS"


@pytest.mark.parametrize(
    ("text", "origins"),
    [
        ("http://localhost:5173", ["http://localhost:5173"]),
        (
            "http://localhost:5173, https://app.example.com:8443",
            ["http://localhost:5173", "https://app.example.com:8443"],
        ),
        (
            '["http://localhost:5173", "http://[::1]:3000"]',
            ["http://localhost:5173", "http://[::1]:3000"],
        ),
        ("", []),
    ],
)
def test_allowed_origins_read_comma_separated_or_as_a_json_list(
    monkeypatch: pytest.MonkeyPatch, text: str, origins: list[str]
) -> None:
    monkeypatch.setenv(VARIABLE, text)
    assert Settings().api_allowed_origins == origins


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("localhost:5173", "'localhost:5173'"),
        ("http://localhost:5173/", "'http://localhost:5173/'"),
        ('["http://localhost:5173"', "'[\"http://localhost:5173\"'"),
    ],
)
async def test_a_bad_allowed_origins_variable_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    text: str,
    shown: str,
) -> None:
    monkeypatch.setenv(VARIABLE, text)
    assert await run_cli("--data-dir", str(tmp_path), "status", "--thread", "t") == 2
    assert capsys.readouterr().err == (
        f"threadwarden: error: settings: {VARIABLE}: expected origins like"
        f" http://localhost:5173, comma-separated or a JSON list, got {shown}\n"
    )
