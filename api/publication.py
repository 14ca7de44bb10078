"""Publication sinks: where threadwarden publishes canonical records, at least once.

Every committed record enters an outbox; the maintenance pass (and every operator mutation)
drains it through the worker's sinks. A sink that fails keeps its records in the outbox with a
growing backoff; the host's alarm comes back for them. Sinks must tolerate duplicates.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class PublishedRecord:
    """A canonical record as a sink receives it."""

    thread_id: str
    sequence: int
    record_id: str
    submission_id: str
    kind: str
    body: Any


class PublicationSink(Protocol):
    """Receives batches of records in thread/sequence order; raise to have them retried.

    A sink may also set ``required = True``: its records must be published before dependent
    native work runs. While any record of a host is unpublished, that host's passes run no
    recovery and no attempt (they keep draining, and rearm at the earlier of the native
    fallback and the next publication retry).
    """

    name: str

    async def publish(self, records: Sequence[PublishedRecord]) -> None: ...
