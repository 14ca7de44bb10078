"""Server-side SQL counts of one measured side: ``pg_stat_statements`` and ``pg_stat_database``.

Statements come from ``pg_stat_statements`` (top-level statements, utility ones included) on the
side's database, leaving out the roles `bench.stack.OBSERVER` and `bench.stack.CONSOLE` (the
console process of ``--streams``, whose statements are counted apart). Transactions come from the
database's commit and rollback counters, which a backend reports only when idle for a while or
when it exits; so they are read with no session left on the database, and the transaction each
new session runs at connection start is taken off, as are the observer's and the console's (one
per statement: neither opens a transaction). Not taken off: the transaction a listening backend
(the console's) runs for each batch of notifications it takes in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import asyncpg

from bench.measure import wait_until
from bench.stack import CONSOLE, OBSERVER

QUIET_DEADLINE_S = 60.0
_TRANSACTION_CONTROL = re.compile(
    r"^\s*(BEGIN|START\s+TRANSACTION|COMMIT|END|ROLLBACK)\s*(;|$|ISOLATION|READ|DEFERRABLE|NOT)",
    re.IGNORECASE,
)
_POOL_RESET = re.compile(r"^\s*SELECT pg_advisory_unlock_all\(\)", re.IGNORECASE)
_STATEMENTS = """
SELECT s.query, sum(s.calls)::bigint AS calls, sum(s.total_exec_time) AS ms,
       r.rolname = $2 AS observer, r.rolname = $3 AS console
  FROM pg_stat_statements s
  JOIN pg_database d ON d.oid = s.dbid
  JOIN pg_roles r ON r.oid = s.userid
 WHERE d.datname = $1
 GROUP BY s.query, r.rolname = $2, r.rolname = $3
"""
_DATABASE = """
SELECT xact_commit + xact_rollback AS transactions, sessions,
       (SELECT count(*) FROM pg_stat_activity WHERE datname = $1) AS backends
  FROM pg_stat_database WHERE datname = $1
"""


@dataclass(frozen=True)
class Counters:
    """A database's transaction and session counters, read with no session connected."""

    transactions: int
    sessions: int


@dataclass(frozen=True)
class Statements:
    statements: int
    """Top-level statements other than BEGIN/COMMIT/ROLLBACK, the observer's left out."""
    transaction_control: int
    observer_calls: int
    console_calls: int
    """Statements of the console process of ``--streams`` (role `bench.stack.CONSOLE`)."""
    pool_resets: int
    """asyncpg's reset on each release of a pooled connection: one round trip, one implicit
    transaction, 4 statements (advisory unlock, CLOSE ALL, UNLISTEN *, RESET ALL), all counted."""
    top: list[tuple[int, float, str]]
    """(calls, total ms, query) of the most called statements, most called first."""


def is_transaction_control(query: str) -> bool:
    """BEGIN / START TRANSACTION / COMMIT / END / ROLLBACK (not ROLLBACK TO SAVEPOINT)."""
    return bool(_TRANSACTION_CONTROL.match(query))


async def reset(admin: asyncpg.Connection[Any]) -> None:
    await admin.execute("SELECT pg_stat_statements_reset()")


async def quiet_counters(admin: asyncpg.Connection[Any], database: str) -> Counters:
    """The database's counters once no session is left and they have stopped moving."""
    last: list[tuple[int, int]] = []

    async def probe() -> tuple[int, int, int]:
        row = await admin.fetchrow(_DATABASE, database)
        assert row is not None
        return int(row["transactions"]), int(row["sessions"]), int(row["backends"])

    def settled(value: tuple[int, int, int]) -> bool:
        counters = value[:2]
        steady = value[2] == 0 and last == [counters]
        last[:] = [counters] if value[2] == 0 else []
        return steady

    transactions, sessions, _ = await wait_until(
        probe, settled, timeout_s=QUIET_DEADLINE_S, what=f"no session left on {database}"
    )
    return Counters(transactions, sessions)


async def statements(admin: asyncpg.Connection[Any], database: str, *, top: int) -> Statements:
    """Statement counts on ``database`` since the last `reset`."""
    rows = await admin.fetch(_STATEMENTS, database, OBSERVER, CONSOLE)
    counted = [r for r in rows if not r["observer"] and not r["console"]]
    control = sum(int(r["calls"]) for r in counted if is_transaction_control(r["query"]))
    total = sum(int(r["calls"]) for r in counted)
    ranked = sorted(counted, key=lambda r: int(r["calls"]), reverse=True)[:top]
    return Statements(
        statements=total - control,
        transaction_control=control,
        observer_calls=sum(int(r["calls"]) for r in rows if r["observer"]),
        console_calls=sum(int(r["calls"]) for r in rows if r["console"]),
        pool_resets=sum(int(r["calls"]) for r in counted if _POOL_RESET.match(r["query"])),
        top=[(int(r["calls"]), round(float(r["ms"]), 1), _one_line(r["query"])) for r in ranked],
    )


_WRITTEN = """
SELECT s.query, sum(s.calls)::bigint AS calls, sum(s.wal_bytes)::bigint AS wal_bytes
  FROM pg_stat_statements s
  JOIN pg_database d ON d.oid = s.dbid
  JOIN pg_roles r ON r.oid = s.userid
 WHERE d.datname = $1 AND r.rolname <> $2
 GROUP BY s.query
"""
_TABLE_BYTES = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
"""


@dataclass(frozen=True)
class Written:
    """What a database's clients had PostgreSQL do so far (cumulative: subtract two)."""

    statements: int
    """Top-level statements other than BEGIN/COMMIT/ROLLBACK, the observer's left out."""
    wal_bytes: int
    """WAL those statements generated (``pg_stat_statements.wal_bytes``: rows, index entries,
    TOAST, full-page images), the observer's left out."""
    table_bytes: int
    """The database's tables with their indexes and TOAST, on disk (``pg_total_relation_size``)."""

    def __sub__(self, other: Written) -> Written:
        return Written(
            self.statements - other.statements,
            self.wal_bytes - other.wal_bytes,
            self.table_bytes - other.table_bytes,
        )


NOTHING_WRITTEN = Written(0, 0, 0)


async def written(
    admin: asyncpg.Connection[Any], observer: asyncpg.Connection[Any], database: str
) -> Written:
    """`Written` of ``database`` now; ``observer`` is connected to it as `OBSERVER`."""
    rows = await admin.fetch(_WRITTEN, database, OBSERVER)
    counted = [r for r in rows if not is_transaction_control(r["query"])]
    return Written(
        statements=sum(int(r["calls"]) for r in counted),
        wal_bytes=sum(int(r["wal_bytes"]) for r in rows),
        table_bytes=int(await observer.fetchval(_TABLE_BYTES)),
    )


def transactions(before: Counters, after: Counters, observer_calls: int) -> int:
    """Transactions of the side: the counter's rise, less session starts and ``observer_calls``
    (statements outside any transaction: the observer's, the console's)."""
    return (
        after.transactions
        - before.transactions
        - (after.sessions - before.sessions)
        - observer_calls
    )


def _one_line(query: str) -> str:
    return " ".join(str(query).split())[:160]
