"""Settings from the environment (prefix ``THREADWARDEN_``); the one place env vars are read."""

from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from workflows.decisions import Timing


class Settings(BaseSettings):
    """Every tunable of threadwarden, bounded and documented in docs/configuration.md."""

    model_config = SettingsConfigDict(env_prefix="THREADWARDEN_", extra="ignore")

    database_url: str | None = None
    """Postgres DSN; unset means the embedded PostgreSQL of ``data_dir``."""
    temporal_address: str | None = None
    """host:port of the Temporal frontend; unset means the embedded dev server."""
    temporal_namespace: str = "default"
    temporal_tls: bool = False
    """Connect to Temporal over TLS (Temporal Cloud and TLS-only clusters)."""
    temporal_api_key: str | None = None
    """API key for Temporal Cloud; implies TLS."""
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
    """Also the attempt's heartbeat interval; the head activity's heartbeat timeout is 30 s."""
    yield_after_ms: int = Field(default=600_000, ge=1_000, le=3_600_000)
    """A head attempt yields at a committed boundary this long after its pass started."""
    pass_deadline_ms: int = Field(default=840_000, ge=2_000, le=3_600_000)
    """A pass still running this long after it started is cancelled and its retry recorded."""
    projection_dispatch_timeout_ms: int = Field(default=30_000, ge=1, le=300_000)
    """Bound of one projection backfill batch in a pass; a timeout is not a failure."""
    message_claim_timeout_ms: int = Field(default=30_000, ge=100, le=600_000)
    """How long one delivery claim of a message between threads may take before its
    retry is persisted (and an abandoned claim comes due again)."""
    sweep_interval_ms: int = Field(default=2_000, ge=100, le=600_000)
    sweep_grace_ms: int = Field(default=2_000, ge=0, le=600_000)
    max_input_bytes: int = Field(default=65_536, ge=1_024, le=10_485_760)
    pool_max_size: int = Field(default=10, ge=1, le=200)
    otel_console: bool = False
    """Print OpenTelemetry spans to stderr (for local debugging)."""

    @field_validator("temporal_tls_cert_path", "temporal_tls_key_path", "temporal_tls_ca_path")
    @classmethod
    def _readable_file(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"expected a readable PEM file, got {str(path)!r}")
        return path

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
        return self

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
