"""Settings completed from Temporal's own client configuration (`temporalio.envconfig`): the
``TEMPORAL_*`` variables and the profiles of ``temporal.toml``, for a process configured as the
Temporal SDKs and CLI are (docs/configuration.md). With `threadwarden.config.settings`, the only
module that reads the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import SecretStr, ValidationError
from temporalio.envconfig import ClientConfigProfile

from threadwarden.config.settings import Settings
from threadwarden.errors import InvalidInput

ENVCONFIG_SOURCE = "temporal envconfig (TEMPORAL_* variables or the temporal.toml profile)"


def with_temporal_envconfig(
    settings: Settings, environ: Mapping[str, str] | None = None
) -> Settings:
    """``settings`` completed from Temporal's own client configuration (`temporalio.envconfig`:
    ``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS*`` and
    the ``TEMPORAL_PROFILE`` of ``temporal.toml`` or ``TEMPORAL_CONFIG_FILE``).

    Precedence: ``THREADWARDEN_*`` settings (and values set in code) win over envconfig, which
    wins over the defaults. An explicit ``temporal_address`` means another server than the
    profile's: the profile is then not read at all, so its API key or certificates never reach
    a server they were not meant for. `InvalidInput` (naming the variable) when the profile
    cannot be loaded or names inline TLS data (threadwarden reads certificates from files).
    """
    if "temporal_address" in settings.model_fields_set:
        return settings
    env = dict(os.environ if environ is None else environ)
    config_file = env.get("TEMPORAL_CONFIG_FILE")
    if config_file and not Path(config_file).is_file():
        raise InvalidInput("TEMPORAL_CONFIG_FILE", "a readable temporal.toml", config_file)
    try:
        profile = ClientConfigProfile.load(override_env_vars=env)
    except Exception as error:  # the SDK's ConfigError (bad TOML, unknown profile)
        raise InvalidInput("TEMPORAL_PROFILE", f"a loadable profile ({error})") from error
    found = _envconfig_values(profile)
    update = {name: value for name, value in found.items() if name not in settings.model_fields_set}
    if not update:
        return settings
    explicit = {name: getattr(settings, name) for name in settings.model_fields_set}
    try:  # validated like the environment: bounds, one line, readable PEM files
        return type(settings).model_validate({**explicit, **update})
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "temporal"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise InvalidInput(f"{field} from {ENVCONFIG_SOURCE}", message) from error


def _envconfig_values(profile: ClientConfigProfile) -> dict[str, object]:
    found: dict[str, object] = {}
    if profile.address:
        found["temporal_address"] = profile.address
    if profile.namespace:
        found["temporal_namespace"] = profile.namespace
    if profile.api_key:
        found["temporal_api_key"] = SecretStr(profile.api_key)
    tls = profile.tls
    if tls is None:
        return found
    if tls.disabled is not True:  # a TLS section enables TLS unless it says disabled
        found["temporal_tls"] = True
    if tls.server_name:
        found["temporal_tls_server_name"] = tls.server_name
    files = {
        "temporal_tls_cert_path": ("TEMPORAL_TLS_CLIENT_CERT_PATH", tls.client_cert),
        "temporal_tls_key_path": ("TEMPORAL_TLS_CLIENT_KEY_PATH", tls.client_private_key),
        "temporal_tls_ca_path": ("TEMPORAL_TLS_SERVER_CA_CERT_PATH", tls.server_root_ca_cert),
    }
    for name, (variable, source) in files.items():
        if isinstance(source, Path):
            found[name] = source
        elif source is not None:  # inline PEM data: never echoed
            raise InvalidInput(variable, "a file path (inline TLS data is not supported)")
    return found
