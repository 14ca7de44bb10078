"""The JSON shapes of the client's views: what ``status --json`` prints and the HTTP API
returns for a thread and a host (the fields tabled in docs/operations.md)."""

from __future__ import annotations

from typing import Any

from threadwarden.ledger.messages import Message
from threadwarden.views import ThreadStatus

THREAD_STATUS_FIELDS = {
    "submission_id",
    "sequence",
    "agent_id",
    "state",
    "outcome",
    "reason",
    "attempts",
    "epoch",
    "waiting_for",
    "created_at",
    "settled_at",
    "source_thread_id",
    "source_message_id",
    "parent_submission_id",
    "parent_thread_id",
    "children",
}
"""What ``status --thread --json`` prints per submission (tabled in docs/operations.md)."""
HOST_STATUS_FIELDS = {
    "host_id",
    "dirty",
    "processed",
    "nonterminal",
    "alarm_at",
    "last_served_thread_id",
    "retry",
    "binding_retries",
    "auxiliary_due",
    "pass_epoch",
    "last_outcome",
    "last_error",
    "updated_at",
}
"""What ``status --host --json`` prints (tabled in docs/operations.md)."""
MESSAGE_FIELDS = {
    "message_id",
    "destination_thread_id",
    "state",
    "attempts",
    "destination_submission_id",
    "last_error",
}


def thread_json(thread: ThreadStatus, sent: list[Message]) -> dict[str, Any]:
    """``status --thread --json``'s document (also the HTTP API's ``GET /v1/threads/{id}``)."""
    return {
        "thread_id": thread.thread_id,
        "host_id": thread.host_id,
        "submissions": [
            s.model_dump(mode="json", include=THREAD_STATUS_FIELDS) for s in thread.submissions
        ],
        "messages_sent": [m.model_dump(mode="json", include=MESSAGE_FIELDS) for m in sent],
    }
