"""Temporal's own client configuration (``TEMPORAL_*``, ``temporal.toml`` profiles) under the
``THREADWARDEN_*`` settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.namespaces import custom_attributes, register_fresh_namespace
from threadwarden.config.connect import Connections
from threadwarden.config.envconfig import with_temporal_envconfig
from threadwarden.config.settings import Settings
from threadwarden.workflows.host import SEARCH_ATTRIBUTES

pytestmark = pytest.mark.usefixtures("no_temporal_env")

UNREACHABLE = "127.0.0.1:1"


@pytest.fixture
async def namespace(connections: Connections) -> str:
    """A namespace registered just now, holding none of threadwarden's search attributes."""
    return await register_fresh_namespace(connections.temporal_address)


@pytest.fixture
def no_temporal_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No Temporal or threadwarden connection variable from the test's own environment."""
    for name in ("ADDRESS", "NAMESPACE", "API_KEY", "TLS", "PROFILE", "CONFIG_FILE"):
        monkeypatch.delenv(f"TEMPORAL_{name}", raising=False)
        monkeypatch.delenv(f"THREADWARDEN_TEMPORAL_{name}", raising=False)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "temporal.toml"))
    (tmp_path / "temporal.toml").write_text("")
    monkeypatch.setenv("THREADWARDEN_DATA_DIR", str(tmp_path / "none"))


def _profiles(path: Path, **profiles: dict[str, str]) -> None:
    lines: list[str] = []
    for name, values in profiles.items():
        lines.append(f"[profile.{name}]")
        lines += [f'{key} = "{value}"' for key, value in values.items()]
    path.write_text("\n".join(lines) + "\n")


async def test_envconfig_profile_names_the_server_and_namespace_the_cli_uses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, connections: Connections, namespace: str
) -> None:
    _profiles(
        tmp_path / "temporal.toml",
        default={"address": UNREACHABLE},
        tw={"address": connections.temporal_address, "namespace": namespace},
    )
    monkeypatch.setenv("TEMPORAL_PROFILE", "tw")
    monkeypatch.setenv("THREADWARDEN_DATABASE_URL", connections.database_url)
    assert await run_cli("setup") == 0
    wanted = {key.name for key in SEARCH_ATTRIBUTES}
    assert wanted <= set(await custom_attributes(connections.temporal_address, namespace))


async def test_envconfig_threadwarden_address_wins_and_the_profile_is_not_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, connections: Connections, namespace: str
) -> None:
    _profiles(tmp_path / "temporal.toml", default={"address": UNREACHABLE, "namespace": namespace})
    monkeypatch.setenv("THREADWARDEN_DATABASE_URL", connections.database_url)
    monkeypatch.setenv("THREADWARDEN_TEMPORAL_ADDRESS", connections.temporal_address)
    assert await run_cli("setup") == 0  # the profile's unreachable address was not used
    assert not {key.name for key in SEARCH_ATTRIBUTES} & set(
        await custom_attributes(connections.temporal_address, namespace)
    )  # nor its namespace: setup went to "default"


def test_envconfig_fills_only_what_threadwarden_settings_leave_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", "temporal.example:7233")
    monkeypatch.setenv("TEMPORAL_NAMESPACE", "from-temporal")
    monkeypatch.setenv("TEMPORAL_API_KEY", "tk-secret-from-envconfig")
    assert Settings().temporal_address is None  # Settings alone reads THREADWARDEN_* only
    resolved = with_temporal_envconfig(Settings())
    assert resolved.temporal_address == "temporal.example:7233"
    assert resolved.temporal_namespace == "from-temporal"
    assert resolved.temporal_api_key is not None
    assert resolved.temporal_api_key.get_secret_value() == "tk-secret-from-envconfig"
    assert resolved.temporal_tls_enabled
    assert "tk-secret" not in repr(resolved) and "tk-secret" not in resolved.model_dump_json()

    monkeypatch.setenv("THREADWARDEN_TEMPORAL_NAMESPACE", "from-threadwarden")
    assert with_temporal_envconfig(Settings()).temporal_namespace == "from-threadwarden"


async def test_envconfig_api_key_is_never_printed(
    monkeypatch: pytest.MonkeyPatch, connections: Connections, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", UNREACHABLE)
    monkeypatch.setenv("TEMPORAL_API_KEY", "tk-never-shown-1234")
    monkeypatch.setenv("THREADWARDEN_DATABASE_URL", connections.database_url)
    assert await run_cli("-v", "setup") == 1
    err = capsys.readouterr().err
    assert UNREACHABLE in err and "tk-never-shown" not in err


@pytest.mark.parametrize(
    ("variable", "value", "field"),
    [
        ("TEMPORAL_PROFILE", "nope", "TEMPORAL_PROFILE"),
        ("TEMPORAL_CONFIG_FILE", "/nonexistent/temporal.toml", "TEMPORAL_CONFIG_FILE"),
        ("TEMPORAL_TLS_CLIENT_CERT_DATA", "inline", "TEMPORAL_TLS_CLIENT_CERT_PATH"),
        ("TEMPORAL_TLS_SERVER_CA_CERT_PATH", "/nonexistent/ca.pem", "temporal_tls_ca_path"),
    ],
)
async def test_envconfig_bad_values_exit_2_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    field: str,
) -> None:
    monkeypatch.setenv(variable, value)
    assert await run_cli("status", "--thread", "t", "--json") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err and '"exit_code": 2' in err
