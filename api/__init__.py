"""threadwarden's public, application-facing API: bindings, outcomes and errors.

Applications import from here; the Temporal, Postgres and worker rooms stay private.
"""

from threadwarden.bindings import (
    AttemptContext,
    Binding,
    BindingRegistry,
    Completed,
    Failed,
    Outcome,
    ThreadRecord,
)
from threadwarden.errors import (
    BindingDigestMismatch,
    BindingUnavailable,
    HostMismatch,
    IdempotencyConflict,
    InvalidInput,
    NotFound,
    Retryable,
    SchemaVersionMismatch,
    StaleAttempt,
    StalePass,
    ThreadwardenError,
)
from threadwarden.hosts import HostAllowanceInvalid, HostMaintenance, HostWaveStillRunning
from threadwarden.publication import PublicationSink, PublishedRecord

__all__ = [
    "AttemptContext",
    "Binding",
    "BindingDigestMismatch",
    "BindingRegistry",
    "BindingUnavailable",
    "Completed",
    "Failed",
    "HostAllowanceInvalid",
    "HostMaintenance",
    "HostWaveStillRunning",
    "HostMismatch",
    "IdempotencyConflict",
    "InvalidInput",
    "NotFound",
    "Outcome",
    "PublicationSink",
    "PublishedRecord",
    "Retryable",
    "SchemaVersionMismatch",
    "StaleAttempt",
    "StalePass",
    "ThreadRecord",
    "ThreadwardenError",
]
