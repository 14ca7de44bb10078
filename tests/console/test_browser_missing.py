"""Without a Chromium the browser tests fail saying so in one line (CI must have one)."""

from __future__ import annotations

import pytest

from tests.console.browser import chromium_path


def test_console_browser_tests_say_in_one_line_that_no_chromium_was_found(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception) as failed:
        chromium_path()
    message = str(failed.value)
    assert message.startswith("no Chromium found") and "\n" not in message
    assert "apt-get install -y chromium" in message
