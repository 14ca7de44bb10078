"""The client's reads: a submission's result, the status of a thread, a submission or a host, the
messages a thread sent, its records (live) and the inbox, with `SubmissionResult`.

`ThreadwardenClient` inherits them from `ClientReads`. None of them writes or wakes a host, so
none needs Temporal (a client connected with ``lazy_temporal`` reads while Temporal is away).
"""

from __future__ import annotations

from typing import Any

import asyncpg
from pydantic import BaseModel

from threadwarden.client.feed import RecordFeed, ThreadStream
from threadwarden.errors import InvalidInput
from threadwarden.ledger.inbox import InboxPage, InboxReader
from threadwarden.ledger.messages import Message, Messages
from threadwarden.ledger.projection import Projection, ThreadSummary
from threadwarden.ledger.status import TOP_SEQUENCE, StatusReader
from threadwarden.reading.feed import await_settlement
from threadwarden.validation import validate_id
from threadwarden.views import (
    FinalOutcome,
    HostStatus,
    SubmissionDetail,
    ThreadStatus,
    TurnPage,
)

INBOX_MAX_LIMIT = 1_000
"""The most entries one `ThreadwardenClient.inbox` call returns."""
TURNS_PAGE = 20
"""The turns one `ThreadwardenClient.turns` call returns by default."""
TURNS_MAX_LIMIT = 100
"""The most turns one `ThreadwardenClient.turns` call returns."""
TURNS_LIMIT = f"an integer from 1 to {TURNS_MAX_LIMIT}"
"""What `ThreadwardenClient.turns` expects of ``limit`` (its refusal says it)."""
TURN_SEQUENCE = "a turn's sequence (an integer, 1 or more)"
"""What `ThreadwardenClient.turns` expects of ``before``."""
INBOX_LIMIT = f"an integer from 1 to {INBOX_MAX_LIMIT}"
"""What `ThreadwardenClient.inbox` expects of ``limit``."""


class SubmissionResult(BaseModel):
    """A settled submission's outcome, from its settlement record."""

    submission_id: str
    thread_id: str
    outcome: FinalOutcome
    result: Any = None
    """What the binding returned (``completed``; ``resolve(..., "ran", result)`` included)."""
    reason: str | None = None
    """Why it failed or was aborted (``failed``, ``aborted``); None when completed."""


class ClientReads:
    """The reads of `ThreadwardenClient`, on the ledger objects its constructor builds."""

    _pool: asyncpg.Pool[Any]
    _status: StatusReader
    _projection: Projection
    _messages: Messages

    async def result(self, submission_id: str, *, timeout: float | None = None) -> SubmissionResult:
        """Wait until the submission settled and return its outcome.

        ``timeout`` is in seconds (None waits as long as it takes). Raises `NotFound` for an
        unknown submission and `ResultTimeout` (a `TimeoutError`) when the timeout passes first;
        the submission goes on and may settle later. The wait listens for the ledger's record
        notifications and reads the row again at least every `RECHECK_S` seconds.
        """
        validate_id("submission", submission_id)
        if timeout is not None and timeout < 0:
            raise InvalidInput("timeout", "seconds, at least 0, or None", timeout)
        thread_id, body = await await_settlement(self._pool, submission_id, timeout_s=timeout)
        return SubmissionResult(submission_id=submission_id, thread_id=thread_id, **body)

    async def thread_status(self, thread_id: str) -> ThreadStatus:
        """A thread's submissions in queue order, with state, outcome and what each waits for.

        Raises `NotFound` for an unknown thread.
        """
        return await self._status.thread(validate_id("thread", thread_id))

    async def submission(self, submission_id: str) -> SubmissionDetail:
        """One submission now: state, outcome, what it waits for, reason and (settled) result.

        Raises `NotFound` for an unknown submission.
        """
        return await self._status.submission(validate_id("submission", submission_id))

    async def turns(
        self, thread_id: str, *, limit: int = TURNS_PAGE, before: int | None = None
    ) -> TurnPage:
        """The thread's turns (its submissions), newest first: each one's input, state,
        outcome, result and what it waits for, as a chat page shows its conversation.

        At most ``limit`` turns (1 to `TURNS_MAX_LIMIT`), those with a sequence below
        ``before`` (None: the latest); pass the page's ``next_before`` to read the older ones
        (None: no turn is older). One index-backed statement per page, however long the
        thread. Raises `NotFound` for an unknown thread.
        """
        validate_id("thread", thread_id)
        _check_count("limit", limit, TURNS_MAX_LIMIT, TURNS_LIMIT)
        if before is not None:
            _check_count("before", before, TOP_SEQUENCE, TURN_SEQUENCE)
        return await self._status.turns(thread_id, limit=limit, before=before)

    async def thread_summary(self, thread_id: str) -> ThreadSummary | None:
        """The projected summary of a thread (None until the projection reached it)."""
        return await self._projection.summary(validate_id("thread", thread_id))

    async def host_status(self, host_id: str) -> HostStatus:
        """A host's maintenance state: generations, alarm, retries, last pass outcome.

        Raises `NotFound` for an unknown host.
        """
        return await self._status.host(validate_id("host", host_id))

    async def messages_sent(self, thread_id: str) -> list[Message]:
        """Messages the thread sent to other threads, with their delivery state."""
        return await self._messages.sent_by(validate_id("thread", thread_id))

    def records(self, thread_id: str, *, wait_for_thread: bool = False) -> RecordFeed:
        """The thread's records: ``async for`` follows them live (`FeedRecord` models),
        ``await`` returns the committed ones now. See `RecordFeed`.

        Iterating an unknown thread raises `NotFound`, or with ``wait_for_thread`` waits for
        its first record (subscribe before the first submission, as ``tail -F`` does)."""
        validate_id("thread", thread_id)
        return RecordFeed(self._pool, thread_id, wait_for_thread=wait_for_thread)

    def stream(self, thread_id: str, *, wait_for_thread: bool = False) -> ThreadStream:
        """The thread's records and live text: ``async for`` yields `FeedRecord` models
        as `records` does and, among them, `TextDelta` models (each streaming step's text so
        far, then each new fragment, before its journaled response). See `ThreadStream`.

        Iterating an unknown thread raises `NotFound`, or with ``wait_for_thread`` waits for
        its first record."""
        validate_id("thread", thread_id)
        return ThreadStream(self._pool, thread_id, wait_for_thread=wait_for_thread)

    async def inbox(self, *, limit: int = 100) -> InboxPage:
        """What waits for a person, across threads, oldest submission first: pending approvals
        (``waiting_for`` ``approval``) and unknown side effects (``unknown-resolution``).

        At most ``limit`` entries (1 to `INBOX_MAX_LIMIT`); ``more`` says whether others wait.
        """
        _check_count("limit", limit, INBOX_MAX_LIMIT, INBOX_LIMIT)
        return await InboxReader(self._pool).waiting(limit)


def _check_count(field: str, value: object, most: int, expected: str) -> None:
    """Refuse ``value`` unless it is an integer from 1 to ``most`` (`InvalidInput` naming
    ``field`` and what it ``expected``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise InvalidInput(field, expected, value)
