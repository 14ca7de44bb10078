"""Where a running ``threadwarden dev`` stack listens: ``<data_dir>/stack.json``, written by the
stack (`threadwarden.cli.stack`) and read by every other command, the client and the console run
from the same folder (`threadwarden.config.connect.resolve`)."""

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from threadwarden.errors import InvalidInput

STACK_FILE = "stack.json"


@dataclass(frozen=True)
class Endpoints:
    """Where a running stack listens."""

    database_url: str
    temporal_address: str
    ui_url: str
    pid: int
    metrics_url: str | None = None
    """The dev worker's Prometheus endpoint (``/healthz`` and ``/readyz`` beside it)."""
    temporal_pid: int | None = None
    """The dev server's process (its own session: a terminal's SIGHUP does not reach it)."""
    postgres_pid: int | None = None
    """The embedded PostgreSQL's postmaster."""
    console_url: str | None = None
    """The dev stack's operator console (``threadwarden console``, docs/console.md)."""
    api_url: str | None = None
    """The dev stack's HTTP API for applications (``{console_url}/v1``, docs/api.md)."""


def write_endpoints(data_dir: Path, endpoints: Endpoints) -> None:
    """Record a running stack so other commands in the folder find it. Atomic (a new file
    renamed over the old): `dev` rewrites it once its worker serves metrics, while other
    commands may be reading it."""
    partial = data_dir / f".{STACK_FILE}.{os.getpid()}"
    partial.write_text(json.dumps(asdict(endpoints), indent=2) + "\n")
    partial.replace(data_dir / STACK_FILE)


def read_endpoints(data_dir: Path) -> Endpoints | None:
    """The running stack recorded in ``data_dir``, or None if absent or no longer alive."""
    path = data_dir / STACK_FILE
    if not path.exists():
        return None
    try:  # a file another program wrote or damaged: refused by name, not as a traceback
        endpoints = Endpoints(**json.loads(path.read_text()))
        if not isinstance(endpoints.pid, int) or not 0 < endpoints.pid < 2**31:
            raise TypeError("pid")
        if not isinstance(endpoints.metrics_url, str | None):
            raise TypeError("metrics_url")
        for url in (endpoints.console_url, endpoints.api_url):
            if not isinstance(url, str | None):
                raise TypeError("url")
        for pid in (endpoints.temporal_pid, endpoints.postgres_pid):
            if not isinstance(pid, int | None):
                raise TypeError("pid")
    except (ValueError, TypeError, RecursionError) as error:  # also non-UTF-8 bytes
        raise InvalidInput(
            "data_dir", f"{path} as `threadwarden dev` writes it (remove it if no stack runs)"
        ) from error
    try:
        os.kill(endpoints.pid, 0)
    except OSError:
        return None
    return endpoints


def clear_endpoints(data_dir: Path) -> None:
    """Forget the recorded stack (on shutdown)."""
    with contextlib.suppress(FileNotFoundError):
        (data_dir / STACK_FILE).unlink()
