"""Numbered, forward-only SQL migrations, serialised by an advisory lock.

Files live in ``ledger/migrations/NNNN_name.sql``; each applies in its own transaction and is
recorded in ``threadwarden.schema_migrations``. Running twice, or from two processes at once, is
safe: the second runner waits for the lock and then finds nothing to do.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources

from ledger.pool import Connection
from threadwarden.errors import SchemaVersionMismatch

logger = logging.getLogger(__name__)

MIGRATION_LOCK_KEY = 0x7457_6D69_6772  # "tWmigr": one lock id for every runner
_FILE = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    """Every migration shipped with this package, in version order."""
    found = []
    for entry in resources.files("ledger").joinpath("migrations").iterdir():
        match = _FILE.fullmatch(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return found


def expected_version() -> int:
    """The schema version this code needs."""
    return len(available_migrations())


async def current_version(conn: Connection) -> int:
    """The applied schema version, 0 for an empty database."""
    exists = await conn.fetchval("SELECT to_regclass('threadwarden.schema_migrations') IS NOT NULL")
    if not exists:
        return 0
    version = await conn.fetchval("SELECT max(version) FROM threadwarden.schema_migrations")
    return int(version or 0)


async def migrate(conn: Connection) -> list[int]:
    """Apply every pending migration; return the versions applied by this call."""
    applied: list[int] = []
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await conn.execute(
            "CREATE SCHEMA IF NOT EXISTS threadwarden;"
            "CREATE TABLE IF NOT EXISTS threadwarden.schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        done = await current_version(conn)
        for migration in available_migrations():
            if migration.version <= done:
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO threadwarden.schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )
            logger.info("applied migration %04d_%s", migration.version, migration.name)
            applied.append(migration.version)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
    return applied


async def verify(conn: Connection) -> int:
    """Refuse to run against a schema older or newer than this code expects, or one whose
    applied migrations are not the ones this code ships (a renamed or replaced file)."""
    have, want = await current_version(conn), expected_version()
    if have != want:
        hint = "run `threadwarden migrate`" if have < want else "upgrade threadwarden"
        raise SchemaVersionMismatch(
            f"database schema: expected version {want}, found {have} ({hint})"
        )
    applied = {
        int(r["version"]): r["name"]
        for r in await conn.fetch("SELECT version, name FROM threadwarden.schema_migrations")
    }
    for migration in available_migrations():
        if applied.get(migration.version) != migration.name:
            raise SchemaVersionMismatch(
                f"database schema: version {migration.version} was applied as"
                f" {applied.get(migration.version)!r}, this code ships {migration.name!r}"
                " (a migration was changed after it was applied)"
            )
    return have
