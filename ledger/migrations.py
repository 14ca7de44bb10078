"""Numbered, forward-only SQL migrations, serialised by an advisory lock.

Files live in ``ledger/migrations/NNNN_name.sql``; each applies in its own transaction and is
recorded in ``threadwarden.schema_migrations`` with the sha256 of the file's bytes. Running
twice, or from two processes at once, is safe: the second runner waits for the lock and then
finds nothing to do. `verify` refuses a database whose applied migrations are not, byte for
byte, the ones this code ships.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

import asyncpg

from threadwarden.errors import SchemaVersionMismatch
from threadwarden.ledger.pool import Connection

logger = logging.getLogger(__name__)

MIGRATION_LOCK_KEY = 0x7457_6D69_6772  # "tWmigr": one lock id for every runner
_FILE = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str
    checksum: str
    """sha256 (hex) of the file's bytes, recorded when the migration is applied."""

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"


def available_migrations(folder: Traversable | None = None) -> list[Migration]:
    """Every migration in ``folder`` (default: the ones shipped with this package), in order."""
    found = []
    for entry in (
        folder or resources.files("threadwarden.ledger").joinpath("migrations")
    ).iterdir():
        match = _FILE.fullmatch(entry.name)
        if match:
            raw = entry.read_bytes()
            found.append(
                Migration(int(match[1]), match[2], raw.decode(), hashlib.sha256(raw).hexdigest())
            )
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


_BOOTSTRAP = """
CREATE SCHEMA IF NOT EXISTS threadwarden;
CREATE TABLE IF NOT EXISTS threadwarden.schema_migrations (
    version integer PRIMARY KEY, name text NOT NULL, checksum text,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp());
ALTER TABLE threadwarden.schema_migrations ADD COLUMN IF NOT EXISTS checksum text;
"""
"""The version table. ``checksum`` is NULL only on rows an unreleased build applied before
checksums were recorded; `migrate` adopts those once (see `_adopt_unrecorded`)."""


async def migrate(conn: Connection, migrations: Sequence[Migration] | None = None) -> list[int]:
    """Apply every pending migration; return the versions applied by this call.

    ``migrations`` defaults to the ones shipped with this package (tests pass their own).
    """
    migrations = available_migrations() if migrations is None else migrations
    applied: list[int] = []
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await conn.execute(_BOOTSTRAP)
        await _adopt_unrecorded(conn, migrations)
        done = await current_version(conn)
        for migration in migrations:
            if migration.version <= done:
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO threadwarden.schema_migrations (version, name, checksum)"
                    " VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    migration.checksum,
                )
            logger.info("applied migration %s", migration.label)
            applied.append(migration.version)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
    return applied


async def _adopt_unrecorded(conn: Connection, migrations: Sequence[Migration]) -> None:
    """Record the checksums of rows applied before checksums existed (same version and name)."""
    rows = await conn.fetch(
        "SELECT version, name FROM threadwarden.schema_migrations WHERE checksum IS NULL"
    )
    shipped = {m.version: m for m in migrations}
    for row in rows:
        migration = shipped.get(int(row["version"]))
        if migration is None or migration.name != row["name"]:
            continue  # verify names the mismatch
        await conn.execute(
            "UPDATE threadwarden.schema_migrations SET checksum = $2"
            " WHERE version = $1 AND checksum IS NULL",
            migration.version,
            migration.checksum,
        )
        logger.warning(
            "migration %s: recorded its checksum (applied before checksums were kept)",
            migration.label,
        )


async def verify(conn: Connection, migrations: Sequence[Migration] | None = None) -> int:
    """Refuse to run against a schema older or newer than this code expects, or one whose
    applied migrations are not the ones this code ships (a renamed, replaced or edited file)."""
    migrations = available_migrations() if migrations is None else migrations
    have, want = await current_version(conn), len(migrations)
    if have != want:
        hint = "run `threadwarden migrate`" if have < want else "upgrade threadwarden"
        raise SchemaVersionMismatch(
            f"database schema: expected version {want}, found {have} ({hint})"
        )
    try:
        rows = await conn.fetch(
            "SELECT version, name, checksum FROM threadwarden.schema_migrations"
        )
    except asyncpg.UndefinedColumnError as error:
        raise SchemaVersionMismatch(
            "database schema: migrations applied without checksums (run `threadwarden migrate`)"
        ) from error
    applied = {int(r["version"]): (r["name"], r["checksum"]) for r in rows}
    for migration in migrations:
        name, checksum = applied.get(migration.version, (None, None))
        if name != migration.name:
            raise SchemaVersionMismatch(
                f"database schema: version {migration.version} was applied as {name!r},"
                f" this code ships {migration.name!r} (a migration was changed after it was"
                " applied)"
            )
        if checksum != migration.checksum:
            raise SchemaVersionMismatch(
                f"database schema: migration {migration.label} was applied with sha256"
                f" {_short(checksum)}, this code ships {_short(migration.checksum)} (the file"
                " was edited after it was applied: add a new migration instead)"
            )
    return have


def _short(checksum: str | None) -> str:
    return "(none recorded: run `threadwarden migrate`)" if checksum is None else checksum[:12]
