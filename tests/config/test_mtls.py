"""Mutual TLS to Temporal: the settings' client certificate, CA and server name reach a real
Temporal server through a TLS-terminating proxy (the dev server itself speaks plaintext only)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from threadwarden.config.connect import Connections, connect_configured
from threadwarden.config.settings import Settings

SERVER_NAME = "temporal.test"

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="the openssl command makes the test certificates"
)


def _openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)


def make_certificates(folder: Path) -> None:
    """A CA, a server certificate for SERVER_NAME and a client certificate, all signed by it."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        folder, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=threadwarden test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    for name, usage, extra in (
        ("server", "serverAuth", f"subjectAltName=DNS:{SERVER_NAME}"),
        ("client", "clientAuth", "subjectAltName=DNS:worker.test"),
    ):
        _openssl(
            folder, "req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}",
        )  # fmt: skip
        (folder / f"{name}.ext").write_text(
            f"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            f"extendedKeyUsage={usage}\n{extra}\n"
        )
        _openssl(
            folder, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
        )  # fmt: skip


@contextlib.asynccontextmanager
async def mtls_proxy(folder: Path, upstream: str) -> AsyncIterator[str]:
    """Terminate TLS (client certificate required, HTTP/2) and pass bytes to ``upstream``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(folder / "ca.pem"))
    context.load_cert_chain(folder / "server.pem", folder / "server.key")
    context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(["h2"])
    host, port = upstream.rsplit(":", 1)

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65_536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def serve(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pump(client_r, server_w), pump(server_r, client_w))

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    address = server.sockets[0].getsockname()
    try:
        yield f"{address[0]}:{address[1]}"
    finally:
        server.close()


async def test_mutual_tls_settings_connect_through_a_tls_endpoint(
    settings: Settings, connections: Connections, tmp_path: Path
) -> None:
    make_certificates(tmp_path)
    mtls = settings.model_copy(
        update={
            "temporal_tls_cert_path": tmp_path / "client.pem",
            "temporal_tls_key_path": tmp_path / "client.key",
            "temporal_tls_ca_path": tmp_path / "ca.pem",
            "temporal_tls_server_name": SERVER_NAME,
        }
    )
    async with mtls_proxy(tmp_path, connections.temporal_address) as address:
        through_tls = Connections(connections.database_url, address)
        client = await connect_configured(mtls, through_tls)  # connecting runs an RPC
        assert client.namespace == settings.temporal_namespace
        without_certificate = mtls.model_copy(
            update={"temporal_tls_cert_path": None, "temporal_tls_key_path": None}
        )
        with pytest.raises(RuntimeError) as refused:  # the endpoint requires a certificate
            await connect_configured(without_certificate, through_tls)
        assert "Failed client connect" in str(refused.value)


def test_mutual_tls_settings_need_both_halves_and_readable_files(tmp_path: Path) -> None:
    (tmp_path / "client.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    with pytest.raises(ValueError, match="temporal_tls_key_path: expected together with"):
        Settings(temporal_tls_cert_path=tmp_path / "client.pem")
    with pytest.raises(ValueError, match="expected a readable PEM file"):
        Settings(temporal_tls_ca_path=tmp_path / "missing.pem")
