"""Secrets in settings stay out of reprs, dumps, logs and error lines; unknown
``THREADWARDEN_*`` variables are reported at start instead of silently ignored."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import threadwarden.config.settings as settings_module
from tests.helpers.cli import run_cli
from threadwarden.config.settings import Settings, unknown_variables

PASSWORD = "pw-3f9c1e7a5b"
API_KEY = "key-8d2b6c40e1"


@pytest.fixture
def fresh_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which unknown variables this process already reported (each is reported once)."""
    monkeypatch.setattr(settings_module, "_reported", set())


def test_settings_secrets_are_masked_in_repr_and_dumps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THREADWARDEN_DATABASE_URL", f"postgresql://app:{PASSWORD}@db:5432/tw")
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_API_KEY", API_KEY)
    settings = Settings()
    shown = [
        repr(settings),
        str(settings),
        settings.model_dump_json(),
        json.dumps(settings.model_dump(mode="json")),
    ]
    assert all(PASSWORD not in text and API_KEY not in text for text in shown)
    assert settings.database_url is not None and settings.temporal_api_key is not None
    assert PASSWORD in settings.database_url.get_secret_value()  # still usable where needed
    assert settings.temporal_api_key.get_secret_value() == API_KEY
    assert settings.temporal_tls_enabled  # an API key still implies TLS


def test_settings_redact_masks_the_dsn_password_and_the_api_key() -> None:
    settings = Settings(
        database_url=f"postgresql://app:{PASSWORD}@db:5432/tw",
        temporal_api_key=API_KEY,
    )
    message = f"cannot reach postgresql://app:{PASSWORD}@db:5432/tw ({PASSWORD}); key {API_KEY}"
    assert settings.redact(message) == "cannot reach postgresql://app:***@db:5432/tw (***); key ***"
    assert Settings().redact(message) == message  # nothing configured, nothing to mask


@pytest.mark.parametrize("as_json", [False, True])
async def test_cli_error_quoting_the_dsn_masks_its_password(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    as_json: bool,
) -> None:
    # asyncpg quotes this parameter's value in its error: here it is the password itself.
    dsn = f"postgresql://app:{PASSWORD}@127.0.0.1:1/none?target_session_attrs={PASSWORD}"
    monkeypatch.setenv("THREADWARDEN_DATABASE_URL", dsn)
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_ADDRESS", "127.0.0.1:1")
    caplog.set_level(logging.DEBUG)
    argv = ["-v", "status", "--thread", "t"] + (["--json"] if as_json else [])
    assert await run_cli(*argv) == 1
    captured = capsys.readouterr()
    assert "***" in captured.err
    assert PASSWORD not in captured.err + captured.out + caplog.text
    if as_json:
        assert json.loads(captured.err.splitlines()[-1])["exit_code"] == 1  # after -v's traceback


def test_settings_reject_control_characters_without_echoing_the_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_API_KEY", f"{API_KEY}\x1b[2J")
    with pytest.raises(ValueError, match="temporal_api_key") as raised:
        Settings()
    assert API_KEY not in str(raised.value)


def test_settings_refuse_a_tls_file_that_is_not_pem_without_echoing_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    key = tmp_path / "client.key"
    key.write_bytes(b"\xff\xfe" + API_KEY.encode() + b"\x00")
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_TLS_CA_PATH", str(key))
    with pytest.raises(ValueError, match="temporal_tls_ca_path") as raised:
        Settings()
    assert API_KEY not in str(raised.value)


def test_unknown_variables_name_the_likely_setting_when_close() -> None:
    environ = {
        "THREADWARDEN_LEASE_MSS": "1",  # a typo
        "THREADWARDEN_BANANA": "1",  # nothing like a setting
        "threadwarden_lease_ms": "5000",  # a setting: names match case-insensitively
        "THREADWARDEN_TASK_QUEUE": "q",
        "OTHER_LEASE_MS": "1",
    }
    assert unknown_variables(environ) == [
        ("THREADWARDEN_BANANA", None),
        ("THREADWARDEN_LEASE_MSS", "THREADWARDEN_LEASE_MS"),
    ]


def test_unknown_variable_is_warned_once_at_start_in_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fresh_reports: None
) -> None:
    monkeypatch.setenv("THREADWARDEN_SWEEP_GRACEMS", "10")
    monkeypatch.setenv("threadwarden_lease_ms", "50000")
    with caplog.at_level(logging.WARNING, logger="threadwarden.config.settings"):
        settings = Settings()
        Settings()
    assert settings.lease_ms == 50_000
    assert [r.getMessage() for r in caplog.records] == [
        "THREADWARDEN_SWEEP_GRACEMS is not a threadwarden setting and is ignored"
        " (did you mean THREADWARDEN_SWEEP_GRACE_MS?)"
    ]


async def test_cli_reports_an_unknown_variable_at_start(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    fresh_reports: None,
) -> None:
    monkeypatch.delenv("THREADWARDEN_DATABASE_URL", raising=False)
    monkeypatch.setenv("THREADWARDEN_DATABSE_URL", "postgresql://db/tw")
    caplog.set_level(logging.WARNING)
    assert await run_cli("--data-dir", str(tmp_path), "status", "--thread", "t") == 1
    warned = [r.getMessage() for r in caplog.records if r.name == "threadwarden.config.settings"]
    assert warned == [
        "THREADWARDEN_DATABSE_URL is not a threadwarden setting and is ignored"
        " (did you mean THREADWARDEN_DATABASE_URL?)"
    ]
