"""`dev` keeps Temporal's usual ports: a port is taken only while something listens on it."""

from __future__ import annotations

import socket
from pathlib import Path

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

from threadwarden.worker.embedded import PortTaken, TemporalDevServer, port_from


def test_port_from_takes_a_port_whose_last_connections_wait_in_time_wait() -> None:
    """A stack stopped a moment ago leaves its server's connections in TIME_WAIT; the next
    `dev` still gets the same port (the server's own listener reuses it too)."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = int(server.getsockname()[1])
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server's side closes first: its end waits in TIME_WAIT
        client.close()
    assert port_from(port, tries=1) == port


def test_port_from_skips_a_port_something_listens_on() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = int(server.getsockname()[1])
        assert port_from(port, tries=1) != port


async def test_a_usual_port_taken_before_the_server_binds_it_moves_to_the_next(
    tmp_path: Path,
) -> None:
    """Another stack can take the port between the check and the server's bind: the server
    exits at once, and the dev server starts again on the next free port."""
    server = TemporalDevServer(tmp_path / "temporal.sqlite", ui=False, usual_ports=True)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server.port = int(taken.getsockname()[1])  # as if taken right after the check
        try:
            await server.start()
            assert server.port != int(taken.getsockname()[1])
            assert "address already in use" in (tmp_path / "temporal.log").read_text()
        finally:
            server.stop()


async def test_a_random_port_taken_before_the_server_binds_it_moves_to_new_ones(
    tmp_path: Path,
) -> None:
    """The tests' servers take random free ports: one taken by any connection before the
    server binds it makes the server start again on new ones, not fail."""
    server = TemporalDevServer(tmp_path / "temporal.sqlite", ui=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = server.port = int(taken.getsockname()[1])
        try:
            client = await server.start()
            assert server.port != port
            await client.workflow_service.get_system_info(GetSystemInfoRequest())
        finally:
            server.stop()
    assert PortTaken((tmp_path / "temporal.log").read_text()).port == port


def test_a_port_the_server_picked_for_itself_taken_keeps_the_usual_ports() -> None:
    """The server also binds ports it picks itself (HTTP API, metrics, internal services);
    when one of those was taken, the next start keeps 7233: only 7233 taken moves it."""
    server = TemporalDevServer(None, ui=False, usual_ports=True)
    port, ui_port = server.port, server.ui_port
    server.move_off(PortTaken("Error: listen tcp 127.0.0.1:45821: bind: address already in use"))
    assert (server.port, server.ui_port) == (port, ui_port)
    server.move_off(
        PortTaken(
            f"Error: can't set frontend port {port}: listen tcp 127.0.0.1:{port}:"
            " bind: address already in use"
        )
    )
    assert server.port > port and server.ui_port > ui_port


def _cmdline_listening_on(port: int) -> list[str]:
    """The command line of the process started with ``--port <port>`` (the stack's server)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue  # gone, or not ours to read
        if "--port" in argv and argv[argv.index("--port") + 1 : argv.index("--port") + 2] == [
            str(port)
        ]:
            return argv
    raise AssertionError(f"no process started with --port {port}")


def test_the_embedded_server_reads_its_transfer_tasks_often(temporal: str) -> None:
    """The stack's Temporal server runs with `DEV_SERVER_CONFIG`: at the default 20 reads a
    second a signal's workflow task waited up to 50 ms for its shard's next read."""
    argv = _cmdline_listening_on(int(temporal.rpartition(":")[2]))
    values = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--dynamic-config-value"]
    assert "history.transferProcessorMaxPollRPS=200" in values, argv
