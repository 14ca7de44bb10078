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
    SchemaVersionMismatch,
    StaleAttempt,
    StalePass,
    ThreadwardenError,
)

__all__ = [
    "AttemptContext",
    "Binding",
    "BindingDigestMismatch",
    "BindingRegistry",
    "BindingUnavailable",
    "Completed",
    "Failed",
    "HostMismatch",
    "IdempotencyConflict",
    "InvalidInput",
    "NotFound",
    "Outcome",
    "SchemaVersionMismatch",
    "StaleAttempt",
    "StalePass",
    "ThreadRecord",
    "ThreadwardenError",
]
