"""threadwarden's public, application-facing API: bindings, outcomes and errors; the client,
its result models and the Temporal plugin.

Applications import from here; the Temporal, Postgres and worker rooms stay private. Importing
``threadwarden`` stays light (a bindings module loads neither Temporal nor asyncpg): the client,
the plugin, the settings and the result and status views (`threadwarden.views`, pydantic
models) load on first access.
"""

import importlib
from typing import TYPE_CHECKING, Any

from threadwarden.bindings import (
    SUMMARY,
    ApprovalDecision,
    AttemptContext,
    Binding,
    BindingRegistry,
    ChildOutcome,
    Completed,
    Failed,
    Memory,
    Outcome,
    SavedCheckpoint,
    ThreadRecord,
)
from threadwarden.errors import (
    BindingDigestMismatch,
    BindingUnavailable,
    BudgetExceeded,
    ChildConflict,
    ChildNotSettled,
    DecisionConflict,
    HostMismatch,
    IdempotencyConflict,
    InvalidInput,
    NotFound,
    NotWaiting,
    PoolExhausted,
    ResultTimeout,
    Retryable,
    SchemaVersionMismatch,
    StackAlreadyRunning,
    StackNotFound,
    StaleAttempt,
    StalePass,
    ThreadBusy,
    ThreadwardenError,
)
from threadwarden.hosts import HostAllowanceInvalid, HostMaintenance, HostWaveStillRunning
from threadwarden.publication import PublicationSink, PublishedRecord

if TYPE_CHECKING:
    from threadwarden.client.client import ThreadwardenClient
    from threadwarden.client.feed import FeedRecord, RecordFeed, ThreadStream
    from threadwarden.client.reads import SubmissionResult
    from threadwarden.config.settings import Settings
    from threadwarden.reading.text import TextDelta
    from threadwarden.views import (
        HostStatus,
        OperatorResult,
        Receipt,
        SubmissionDetail,
        SubmissionView,
        ThreadStatus,
        TurnPage,
        TurnView,
    )
    from threadwarden.worker.plugin import ThreadwardenPlugin

_LAZY = {
    "FeedRecord": "threadwarden.client.feed",
    "HostStatus": "threadwarden.views",
    "OperatorResult": "threadwarden.views",
    "Receipt": "threadwarden.views",
    "RecordFeed": "threadwarden.client.feed",
    "Settings": "threadwarden.config.settings",
    "SubmissionDetail": "threadwarden.views",
    "SubmissionResult": "threadwarden.client.reads",
    "SubmissionView": "threadwarden.views",
    "TextDelta": "threadwarden.reading.text",
    "ThreadStatus": "threadwarden.views",
    "ThreadStream": "threadwarden.client.feed",
    "ThreadwardenClient": "threadwarden.client.client",
    "TurnPage": "threadwarden.views",
    "TurnView": "threadwarden.views",
    "ThreadwardenPlugin": "threadwarden.worker.plugin",
}
"""Names that need Temporal, asyncpg or pydantic, imported when first used (PEP 562)."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'threadwarden' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ApprovalDecision",
    "AttemptContext",
    "Binding",
    "BindingDigestMismatch",
    "BindingRegistry",
    "BindingUnavailable",
    "BudgetExceeded",
    "Completed",
    "ChildConflict",
    "ChildNotSettled",
    "ChildOutcome",
    "DecisionConflict",
    "Failed",
    "FeedRecord",
    "HostAllowanceInvalid",
    "HostMaintenance",
    "HostWaveStillRunning",
    "HostMismatch",
    "HostStatus",
    "Memory",
    "IdempotencyConflict",
    "InvalidInput",
    "NotFound",
    "NotWaiting",
    "OperatorResult",
    "Outcome",
    "PublicationSink",
    "PoolExhausted",
    "PublishedRecord",
    "Receipt",
    "RecordFeed",
    "ResultTimeout",
    "Retryable",
    "SavedCheckpoint",
    "SUMMARY",
    "SchemaVersionMismatch",
    "Settings",
    "StackAlreadyRunning",
    "StackNotFound",
    "StaleAttempt",
    "StalePass",
    "SubmissionResult",
    "SubmissionDetail",
    "SubmissionView",
    "TextDelta",
    "ThreadRecord",
    "ThreadStatus",
    "ThreadStream",
    "ThreadwardenClient",
    "ThreadBusy",
    "ThreadwardenError",
    "ThreadwardenPlugin",
    "TurnPage",
    "TurnView",
]
