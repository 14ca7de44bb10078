"""Connecting to the services: where the ledger and Temporal are (`Connections`: the settings, else
the stack ``threadwarden dev`` recorded) and the Temporal client the settings describe (namespace,
TLS or mutual TLS, API key), shared by the client, the console, the CLI and the worker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from temporalio.client import Client, Plugin
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime
from temporalio.service import TLSConfig

from threadwarden.config.endpoints import read_endpoints
from threadwarden.config.settings import Settings
from threadwarden.config.tracing import interceptors
from threadwarden.errors import StackNotFound


@dataclass(frozen=True)
class Connections:
    """Where the ledger and Temporal are, resolved from settings or the running dev stack."""

    database_url: str = field(repr=False)  # may hold a password
    temporal_address: str
    ui_url: str | None = None


def resolve(settings: Settings) -> Connections:
    """Settings win; otherwise the stack ``threadwarden dev`` recorded in the data dir."""
    stack = read_endpoints(settings.data_dir)
    configured = settings.database_url.get_secret_value() if settings.database_url else None
    database_url = configured or (stack.database_url if stack else None)
    temporal_address = settings.temporal_address or (stack.temporal_address if stack else None)
    if database_url is None or temporal_address is None:
        raise StackNotFound(
            f"no running stack in {settings.data_dir} and THREADWARDEN_DATABASE_URL /"
            " THREADWARDEN_TEMPORAL_ADDRESS unset: start `threadwarden dev` or set them"
        )
    return Connections(database_url, temporal_address, stack.ui_url if stack else None)


async def connect_temporal(address: str, namespace: str) -> Client:
    """A plaintext client with the pydantic data converter and the tracing interceptor (the
    dev stack's server; tests)."""
    return await Client.connect(
        address,
        namespace=namespace,
        data_converter=pydantic_data_converter,
        interceptors=interceptors(),
    )


def tls_config(settings: Settings) -> bool | TLSConfig:
    """False (plaintext), True (TLS with the system roots), or a `TLSConfig` with the client
    certificate, the server CA and the server name the settings name (files read now)."""
    if not settings.temporal_tls_enabled:
        return False
    paths = (
        settings.temporal_tls_cert_path,
        settings.temporal_tls_key_path,
        settings.temporal_tls_ca_path,
    )
    if all(p is None for p in paths) and settings.temporal_tls_server_name is None:
        return True
    cert, key, ca = (None if p is None else p.read_bytes() for p in paths)
    return TLSConfig(
        client_cert=cert,
        client_private_key=key,
        server_root_ca_cert=ca,
        domain=settings.temporal_tls_server_name,
    )


async def connect_configured(
    settings: Settings,
    connections: Connections,
    plugins: Sequence[Plugin] = (),
    *,
    runtime: Runtime | None = None,
) -> Client:
    """The Temporal client the settings describe (namespace, TLS or mutual TLS, API key), with
    the pydantic data converter and the tracing interceptor, or with ``plugins`` (which bring
    the interceptor themselves: `ThreadwardenPlugin` does); on ``runtime`` (default: the SDK's
    default runtime)."""
    api_key = settings.temporal_api_key
    return await Client.connect(
        connections.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=pydantic_data_converter,
        interceptors=[] if plugins else interceptors(),
        plugins=plugins,
        tls=tls_config(settings),
        api_key=api_key.get_secret_value() if api_key else None,
        runtime=runtime,
    )
