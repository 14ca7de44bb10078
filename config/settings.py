"""Settings from the environment (prefix ``THREADWARDEN_``), and the ``OTEL_*`` variables
threadwarden acts on itself; with `threadwarden.config.envconfig` (Temporal's ``TEMPORAL_*``),
the only place environment variables are read."""

import difflib
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated
from urllib.parse import unquote, urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from threadwarden.protocol.decisions import Timing

logger = logging.getLogger(__name__)

ENV_PREFIX = "THREADWARDEN_"
MASK = "***"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
"""Control characters and lone surrogates (non-UTF-8 bytes of the environment arrive as these)."""
_reported: set[str] = set()
"""Unknown variables already warned about by this process (each is reported once)."""

DEFAULT_METRICS_ADDRESS = "127.0.0.1:9464"
"""Where ``threadwarden worker`` serves its metrics when ``metrics_address`` is unset."""
_ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]*):([0-9]{1,5})$")
"""``host:port`` (an empty host binds every interface; an IPv6 host in brackets)."""
_ORIGIN = re.compile(r"https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?")
"""A browser origin: scheme, host and optional port, nothing more."""
_ORIGINS_EXPECTED = "expected origins like http://localhost:5173, comma-separated or a JSON list"

POOL_RESERVE = 4
"""Connections a worker's pool holds beyond one per activity and local-activity slot: a running
head's lease renewal beside its binding's write, the startup checks, a few to spare."""


@dataclass(frozen=True)
class Capacity:
    """What one worker process takes on: its Temporal slots and the Postgres pool serving them."""

    workflow_tasks: int
    activities: int
    local_activities: int
    pool_size: int
    shrunk: bool = False
    """The configured slots did not fit an explicit ``pool_max_size`` and were cut to fit it."""


class Settings(BaseSettings):
    """Every tunable of threadwarden, bounded and documented in docs/configuration.md."""

    # Errors never quote the value: it may be the DSN or the API key.
    model_config = SettingsConfigDict(
        env_prefix="THREADWARDEN_", extra="ignore", hide_input_in_errors=True
    )

    database_url: SecretStr | None = None
    """Postgres DSN; unset means the embedded PostgreSQL of ``data_dir``. Secret: its repr and
    every message threadwarden prints mask it (`redact`)."""
    temporal_address: str | None = None
    """host:port of the Temporal frontend; unset means the embedded dev server."""
    temporal_namespace: str = Field(default="default", min_length=1, max_length=255)
    temporal_tls: bool = False
    """Connect to Temporal over TLS (Temporal Cloud and TLS-only clusters)."""
    temporal_api_key: SecretStr | None = None
    """API key for Temporal Cloud; implies TLS. Secret, like ``database_url``."""
    temporal_tls_cert_path: Path | None = None
    """Client certificate (PEM) for mutual TLS; needs ``temporal_tls_key_path``; implies TLS."""
    temporal_tls_key_path: Path | None = None
    """Private key (PEM) of the client certificate."""
    temporal_tls_ca_path: Path | None = None
    """Root CA (PEM) to verify the server with, instead of the system roots; implies TLS."""
    temporal_tls_server_name: str | None = Field(default=None, min_length=1, max_length=253)
    """Name to verify the server certificate against (SNI), when it differs from the address."""
    task_queue: str = Field(default="threadwarden", min_length=1, max_length=200)
    data_dir: Path = Path(".threadwarden")

    alarm_backoff_base_ms: int = Field(default=100, ge=1, le=60_000)
    alarm_backoff_cap_ms: int = Field(default=5_000, ge=1, le=3_600_000)
    wake_scan_interval_ms: int = Field(default=1_000, ge=1, le=3_600_000)
    lease_ms: int = Field(default=30_000, ge=1_000, le=600_000)
    lease_renew_ms: int = Field(default=10_000, ge=100, le=20_000)
    """Also the attempt's heartbeat interval (and the head workers' heartbeat throttle, at most
    2 s); the head activity's heartbeat timeout is ``lease_ms``."""
    yield_after_ms: int = Field(default=600_000, ge=1_000, le=3_600_000)
    """A head attempt yields at a committed boundary this long after its pass started."""
    pass_deadline_ms: int = Field(default=840_000, ge=2_000, le=3_600_000)
    """A pass still running this long after it started is cancelled and its retry recorded."""
    inline_budget_ms: int = Field(default=2_000, ge=0, le=5_000)
    """How long an attempt of an inline binding's head runs on the pass's worker (a local
    activity, holding a local-activity slot): past it the attempt yields at its next committed
    step, or before a step declared too long for what is left (the budget never cuts a step in
    flight), and the head is handed off: its later attempts are dispatched to its agent's
    queue. At most 5 s: an inline head whose binding declares its long steps never outlives a
    workflow task's heartbeat. 0: no head runs inline (every attempt is dispatched)."""
    idle_linger_ms: int = Field(default=2_000, ge=0, le=60_000)
    """How long an idle host's workflow run waits for a wake before it completes. A wake that
    meets a run while its last task completes it waits about a second on the server (the
    new run starts only then); a turn sent right after the previous one settled finds the run
    still open instead. 0: the run completes as soon as its host is idle."""
    inline_quick_ms: int = Field(default=500, ge=0, le=5_000)
    """An agent whose last 8 attempts on a worker each ended within this long has its heads run
    inline on that worker too, as an inline binding's (within ``inline_budget_ms``), until one
    of its attempts is slower: a fast agent's turn skips the activity round trip through the
    Temporal server. 0: only bindings declared ``inline`` run inline."""
    live_text: bool = True
    """Whether attempts write live text (the model's words as they are generated, for readers
    of the event stream, ``watch`` and the console; docs/agents.md, "Streaming"). False: the
    adapters still journal each response once; readers see it when it is journaled."""
    head_start_timeout_ms: int = Field(default=60_000, ge=1_000, le=600_000)
    """How long a head attempt waits on its agent's task queue for a worker with the binding
    (and a free slot) to start it before it counts as binding-unavailable (binding retry)."""
    sticky_start_timeout_ms: int = Field(default=10_000, ge=1_000, le=60_000)
    """How long a host's next workflow task waits for the worker that ran its last one (which
    holds the run in its cache) before any worker of the task queue may take it, replaying the
    run's history: after a worker dies, its hosts stall this long once their heads' heartbeats
    time out (Temporal's sticky schedule-to-start timeout; the SDK's 10 s by default)."""
    projection_dispatch_timeout_ms: int = Field(default=30_000, ge=1, le=300_000)
    """Bound of one projection backfill batch in a pass; a timeout is not a failure."""
    message_claim_timeout_ms: int = Field(default=30_000, ge=100, le=600_000)
    """How long one delivery claim of a message between threads may take before its
    retry is persisted (and an abandoned claim comes due again)."""
    sweep_interval_ms: int = Field(default=2_000, ge=100, le=600_000)
    """Pause between two sweeps while the sweeper is busy (it woke hosts or an alarm is near)."""
    sweep_idle_interval_ms: int = Field(default=90_000, ge=100, le=3_600_000)
    """Longest pause of an idle sweeper (6 history events per sweep: 240 per hour at 90 s)."""
    sweep_grace_ms: int = Field(default=2_000, ge=0, le=600_000)
    max_input_bytes: int = Field(default=65_536, ge=1_024, le=10_485_760)
    max_concurrent_workflow_tasks: int = Field(default=50, ge=2, le=1_000)
    """Workflow-task slots of a worker (no database connection: workflows never touch it)."""
    max_concurrent_activities: int = Field(default=20, ge=1, le=1_000)
    """Activity slots of a worker (heads, publication, deliveries, waves); one connection each."""
    max_concurrent_local_activities: int = Field(default=10, ge=1, le=1_000)
    """Local-activity slots (the short pass steps and the sweep); one connection each."""
    pool_max_size: int | None = Field(default=None, ge=1, le=500)
    """Connections of a worker's pool; unset: activities + local activities + `POOL_RESERVE`."""
    pool_acquire_timeout_ms: int = Field(default=5_000, ge=100, le=25_000)
    """Longest wait for a pooled connection before `PoolExhausted` (below the 30 s local steps)."""
    otel_console: bool = False
    """Print OpenTelemetry spans to stderr (for local debugging)."""
    metrics_address: str | None = Field(default=None, min_length=1, max_length=300)
    """``host:port`` of the worker's Prometheus endpoint (with ``/healthz`` and ``/readyz``),
    or ``off``. Unset: ``threadwarden worker`` serves on `DEFAULT_METRICS_ADDRESS`, ``dev`` on
    a free port, a `ThreadwardenPlugin` in an application on none (its domain metrics go to the
    global OpenTelemetry meter provider)."""
    metrics_gauge_interval_ms: int = Field(default=5_000, ge=1_000, le=600_000)
    """The ledger gauges are read (one query) at most this often, when scraped."""
    console_address: str = Field(default="127.0.0.1:8470", min_length=1, max_length=300)
    """``host:port`` of ``threadwarden console`` (port 0: any free port). A host other than a
    loopback address needs ``console_token`` or ``api_token``."""
    console_token: SecretStr | None = Field(default=None, min_length=16, max_length=512)
    """The operator console's bearer token (or login-form password): it may do everything.
    Either it or ``api_token`` lets the console bind beyond loopback; either set, every request
    needs a token."""
    console_token_name: str = Field(default="operator", pattern=r"^[A-Za-z0-9._:@-]{1,64}$")
    """Who the console records as the operator for requests carrying ``console_token``
    (without a token, on loopback, it records ``local``)."""
    console_max_body_bytes: int = Field(default=131_072, ge=4_096, le=10_485_760)
    """Largest request body the console (and its HTTP API) reads; a larger one is refused with
    413."""
    api_token: SecretStr | None = Field(default=None, min_length=16, max_length=512)
    """The HTTP API's application token (bearer): it may submit, read, follow, approve, deny,
    answer and abort, but not resolve (the console token may do everything). Either token makes
    every request need one; either lets the console bind beyond loopback."""
    api_token_name: str = Field(default="app", pattern=r"^[A-Za-z0-9._:@-]{1,64}$")
    """Who decisions taken with ``api_token`` record as their operator."""
    api_allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list, max_length=50)
    """Browser origins (``https://app.example.com``) allowed to call the HTTP API across
    origins (CORS); none by default: only the console's own origin."""
    failpoints: str = ""
    """Failpoints armed in a worker process (``location=probability,…[:seed=N]``, see
    `Failpoints.from_spec`); empty arms none. For chaos runs, never production."""

    @field_validator("temporal_tls_cert_path", "temporal_tls_key_path", "temporal_tls_ca_path")
    @classmethod
    def _readable_file(cls, path: Path | None) -> Path | None:
        if path is None:
            return path
        try:
            pem = path.read_bytes() if path.is_file() else None
        except (OSError, ValueError):  # unreadable, or a NUL in the path
            pem = None
        if pem is None or b"-----BEGIN " not in pem:  # never echo the content: it may be a key
            raise ValueError(f"expected a readable PEM file, got {str(path)!r}")
        return path

    @field_validator(
        "database_url",
        "temporal_address",
        "temporal_namespace",
        "temporal_api_key",
        "temporal_tls_server_name",
        "task_queue",
    )
    @classmethod
    def _one_line(cls, value: str | SecretStr | None) -> str | SecretStr | None:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if text is not None and _CONTROL.search(text) is not None:  # the value is not shown
            raise ValueError("expected UTF-8 text without control characters")
        return value

    @field_validator("api_allowed_origins", mode="before")
    @classmethod
    def _origins(cls, value: object) -> object:
        """A list of origins, or the variable's text: origins separated by commas
        (``http://localhost:5173,https://app.example.com``) or a JSON list (empty: none)."""
        origins = value
        if isinstance(value, str) and value.lstrip().startswith("["):
            try:
                origins = json.loads(value)
            except ValueError as error:
                raise ValueError(f"{_ORIGINS_EXPECTED}, got {value[:200]!r}") from error
        elif isinstance(value, str):
            origins = [origin.strip() for origin in value.split(",") if origin.strip()]
        for origin in origins if isinstance(origins, list) else [origins]:
            if not isinstance(origin, str) or _ORIGIN.fullmatch(origin) is None:
                raise ValueError(f"{_ORIGINS_EXPECTED}, got {str(origin)[:200]!r}")
        return origins

    @field_validator("console_address")
    @classmethod
    def _console_host_port(cls, value: str) -> str:
        found = _ADDRESS.match(value)
        if found is None or int(found.group(2)) > 65_535:
            raise ValueError("expected host:port (port 0 to 65535)")
        return value

    @property
    def console_bind(self) -> tuple[str, int]:
        """Host and port of the operator console (an empty host: every interface)."""
        host, _, port = self.console_address.rpartition(":")
        return host.strip("[]"), int(port)

    @field_validator("metrics_address")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None or value == "off":
            return value
        found = _ADDRESS.match(value)
        if found is None or int(found.group(2)) > 65_535:
            raise ValueError("expected host:port (port 0 to 65535) or off")
        return value

    @property
    def metrics_bind(self) -> tuple[str, int] | None:
        """Host and port of the metrics endpoint, or None when unset or ``off``."""
        if self.metrics_address is None or self.metrics_address == "off":
            return None
        host, _, port = self.metrics_address.rpartition(":")
        return host.strip("[]"), int(port)

    @model_validator(mode="after")
    def _report_unknown_variables(self) -> "Settings":
        for name, meant in unknown_variables(os.environ):
            if name not in _reported:
                _reported.add(name)
                hint = f" (did you mean {meant}?)" if meant else ""
                logger.warning("%s is not a threadwarden setting and is ignored%s", name, hint)
        return self

    @model_validator(mode="after")
    def _check_relations(self) -> "Settings":
        if (self.temporal_tls_cert_path is None) != (self.temporal_tls_key_path is None):
            raise ValueError(
                "temporal_tls_key_path: expected together with temporal_tls_cert_path (mutual TLS"
                " needs both)"
            )
        if self.alarm_backoff_cap_ms < self.alarm_backoff_base_ms:
            raise ValueError("alarm_backoff_cap_ms: expected at least alarm_backoff_base_ms")
        if self.lease_renew_ms >= self.lease_ms:
            raise ValueError("lease_renew_ms: expected less than lease_ms")
        if self.yield_after_ms >= self.pass_deadline_ms:
            raise ValueError("yield_after_ms: expected less than pass_deadline_ms")
        if self.sweep_idle_interval_ms < self.sweep_interval_ms:
            raise ValueError("sweep_idle_interval_ms: expected at least sweep_interval_ms")
        return self

    @property
    def capacity(self) -> Capacity:
        """Slots and pool sized together: every activity and local-activity slot can hold one
        connection at a time, plus `POOL_RESERVE`.

        Unset ``pool_max_size`` is derived from the slots. An explicit one smaller than that cuts
        both activity kinds in proportion to fit ``pool_max_size - POOL_RESERVE`` (at least one
        slot each); ``shrunk`` says so and the worker logs a warning.
        """
        activities = self.max_concurrent_activities
        local = self.max_concurrent_local_activities
        needed = activities + local + POOL_RESERVE
        pool = needed if self.pool_max_size is None else self.pool_max_size
        if pool >= needed:
            return Capacity(self.max_concurrent_workflow_tasks, activities, local, pool)
        budget = max(2, pool - POOL_RESERVE)
        fitted_local = min(local, max(1, round(budget * local / (activities + local))))
        fitted_activities = min(activities, max(1, budget - fitted_local))
        return Capacity(
            self.max_concurrent_workflow_tasks,
            fitted_activities,
            fitted_local,
            pool,
            shrunk=True,
        )

    def redact(self, text: str) -> str:
        """``text`` with the database password, the DSN and the API key masked (for error
        messages that may quote a connection string)."""
        found: list[tuple[str, str]] = []
        if self.database_url is not None:
            dsn = self.database_url.get_secret_value()
            try:
                password = urlsplit(dsn).password
            except ValueError:  # not a URL: mask it whole
                password = None
            if password:
                masked = dsn.replace(f":{password}@", f":{MASK}@", 1)
                found += [(dsn, masked), (password, MASK), (unquote(password), MASK)]
            else:
                found.append((dsn, MASK))
        if self.temporal_api_key is not None:
            found.append((self.temporal_api_key.get_secret_value(), MASK))
        for secret, shown in found:
            if len(secret) >= 4:  # shorter "secrets" would mask ordinary words
                text = text.replace(secret, shown)
        return text

    @property
    def temporal_tls_enabled(self) -> bool:
        """TLS is on when asked for, or implied by an API key, a client certificate or a CA."""
        return (
            self.temporal_tls
            or self.temporal_api_key is not None
            or self.temporal_tls_cert_path is not None
            or self.temporal_tls_ca_path is not None
        )

    @property
    def timing(self) -> Timing:
        return Timing(
            alarm_backoff_base=self.alarm_backoff_base_ms,
            alarm_backoff_cap=self.alarm_backoff_cap_ms,
            wake_scan_interval=self.wake_scan_interval_ms,
        )


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """The ``THREADWARDEN_*`` variables of ``environ`` that name no setting, each with the
    variable of the closest setting when one is close (a likely typo), else None."""
    known = {name.upper(): f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}
    unknown: list[tuple[str, str | None]] = []
    for name in sorted(environ):
        upper = name.upper()  # pydantic-settings matches names case-insensitively
        if not upper.startswith(ENV_PREFIX) or upper[len(ENV_PREFIX) :] in known:
            continue
        close = difflib.get_close_matches(upper[len(ENV_PREFIX) :], known, n=1, cutoff=0.75)
        unknown.append((name, known[close[0]] if close else None))
    return unknown


def worker_capacity(settings: Settings) -> Capacity:
    """`Settings.capacity`, warning once when an explicit ``pool_max_size`` cut the slots."""
    capacity = settings.capacity
    if capacity.shrunk:
        logger.warning(
            "pool_max_size=%d is below the worker's slots (%d activities + %d local activities"
            " + %d reserve): running %d activities and %d local activities",
            capacity.pool_size,
            settings.max_concurrent_activities,
            settings.max_concurrent_local_activities,
            POOL_RESERVE,
            capacity.activities,
            capacity.local_activities,
        )
    return capacity
