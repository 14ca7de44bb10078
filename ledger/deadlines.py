"""A host's auxiliary deadlines: when publication, message delivery, the projection backfill and
marked host work are next due. Each joins the host's alarm (the host plug-in's own deadline is
added by the caller). Read with the host row in one statement: two index minimums and two
columns, so a caught-up pass stays O(1) in the ledger's size."""

from __future__ import annotations

from datetime import datetime

import asyncpg
from pydantic import BaseModel

from threadwarden.ledger.models import to_ms


def deadlines(acknowledged: str | None = None) -> str:
    """`DEADLINES`; ``acknowledged`` names a CTE of the same statement with the ``record_id`` of
    outbox rows it deletes: their publication is not due (the statement's snapshot still shows
    them)."""
    skip = (
        ""
        if acknowledged is None
        else f" AND p.record_id NOT IN (SELECT a.record_id FROM {acknowledged} a)"
    )
    return f"""
       (SELECT min(not_before) FROM threadwarden.publications p
         WHERE p.host_id = h.host_id{skip}) AS publication_due,
       (SELECT min(not_before) FROM threadwarden.messages m
         WHERE m.source_host_id = h.host_id AND m.state = 'pending') AS message_due,
       projection_due_at,
       host_work_due_at,
       clock_timestamp() AS due_checked_at
"""


DEADLINES = deadlines()
"""The host's auxiliary deadlines: the host row plus two index lookups (O(1) in the ledger)."""


class AuxiliaryDue(BaseModel):
    """The auxiliary deadlines of a host in the ledger (the host plug-in keeps its own)."""

    publication_due: datetime | None
    message_due: datetime | None
    projection_due: datetime | None
    host_work_due: datetime | None = None
    """Host work marked durably for the host plug-in (`threadwarden.ledger.host_work`)."""
    checked_at: datetime | None = None
    """Postgres' clock when they were read: "is it due" is decided on the clock that set them,
    so a skewed worker clock cannot make due work look early (and spin the alarm)."""

    def is_due(self, deadline: datetime | None) -> bool:
        """``deadline`` has come, on the database's clock."""
        return deadline is not None and self.checked_at is not None and deadline <= self.checked_at

    def earliest(self, extra: datetime | None = None) -> int | None:
        """The combined deadline (epoch ms) the alarm must honour, with ``extra`` joined."""
        found = [
            to_ms(t)
            for t in (
                self.publication_due,
                self.message_due,
                self.projection_due,
                self.host_work_due,
                extra,
            )
            if t is not None
        ]
        return min(found) if found else None


def auxiliary_due_of(row: asyncpg.Record | None) -> AuxiliaryDue:
    """The deadlines of a row selected with `DEADLINES` (none for a missing host)."""
    if row is None:
        return AuxiliaryDue(publication_due=None, message_due=None, projection_due=None)
    return AuxiliaryDue(
        publication_due=row["publication_due"],
        message_due=row["message_due"],
        projection_due=row["projection_due_at"],
        host_work_due=row["host_work_due_at"],
        checked_at=row["due_checked_at"],
    )
