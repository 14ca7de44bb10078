"""Schema migrations on empty databases: from scratch, re-run, concurrent runners, verify
(version, names and the checksum of every applied file)."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from threadwarden.errors import SchemaVersionMismatch
from threadwarden.ledger.migrations import (
    Migration,
    available_migrations,
    current_version,
    expected_version,
    migrate,
    verify,
)


@pytest.fixture
async def conn(empty_database_url: str) -> AsyncIterator[asyncpg.Connection[Any]]:
    """One connection to a database with no schema at all."""
    connection = await asyncpg.connect(empty_database_url)
    yield connection
    await connection.close()


@pytest.fixture
async def migrated(conn: asyncpg.Connection[Any]) -> asyncpg.Connection[Any]:
    """The same connection once the shipped migrations are applied: for tests of `verify`
    against a schema that was then changed by hand."""
    await migrate(conn)
    return conn


async def _versions(conn: asyncpg.Connection[Any]) -> list[tuple[int, str, str]]:
    rows = await conn.fetch(
        "SELECT version, name, checksum FROM threadwarden.schema_migrations ORDER BY version"
    )
    return [(r["version"], r["name"], r["checksum"]) for r in rows]


def _sha256_of_shipped_file(migration: Migration) -> str:
    """Computed here from the file itself, independently of the code under test."""
    folder = resources.files("threadwarden.ledger").joinpath("migrations")
    return hashlib.sha256(folder.joinpath(f"{migration.label}.sql").read_bytes()).hexdigest()


@pytest.fixture
def own_migrations(tmp_path: Path) -> Path:
    """A copy of the shipped migration files that a test may edit."""
    folder = tmp_path / "migrations"
    shutil.copytree(
        Path(str(resources.files("threadwarden.ledger").joinpath("migrations"))), folder
    )
    return folder


def test_available_migrations_are_numbered_from_one_without_gaps() -> None:
    versions = [m.version for m in available_migrations()]
    assert versions == list(range(1, expected_version() + 1))
    assert expected_version() >= 1


async def test_migrate_from_scratch_reaches_the_expected_version(
    conn: asyncpg.Connection[Any],
) -> None:
    assert await current_version(conn) == 0

    applied = await migrate(conn)

    assert applied == list(range(1, expected_version() + 1))
    assert await current_version(conn) == expected_version()
    assert await _versions(conn) == [
        (m.version, m.name, _sha256_of_shipped_file(m)) for m in available_migrations()
    ]
    tables = await conn.fetch(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'threadwarden' ORDER BY tablename"
    )
    assert {"hosts", "threads", "submissions", "records", "schema_migrations"} <= {
        t["tablename"] for t in tables
    }


async def test_migrate_again_applies_nothing(conn: asyncpg.Connection[Any]) -> None:
    await migrate(conn)
    before = await conn.fetch("SELECT * FROM threadwarden.schema_migrations ORDER BY version")

    applied = await migrate(conn)

    assert applied == []
    assert await current_version(conn) == expected_version()
    after = await conn.fetch("SELECT * FROM threadwarden.schema_migrations ORDER BY version")
    assert [dict(r) for r in after] == [dict(r) for r in before]


async def test_migrate_concurrently_applies_each_version_once(
    empty_database_url: str,
) -> None:
    first = await asyncpg.connect(empty_database_url)
    second = await asyncpg.connect(empty_database_url)
    try:
        applied = await asyncio.gather(migrate(first), migrate(second))
        rows = await first.fetch(
            "SELECT version, count(*) AS n FROM threadwarden.schema_migrations GROUP BY version"
            " ORDER BY version"
        )
        held = await first.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
    finally:
        await first.close()
        await second.close()

    everything = list(range(1, expected_version() + 1))
    assert sorted(applied) == [[], everything]
    assert [(r["version"], r["n"]) for r in rows] == [(v, 1) for v in everything]
    assert held == 0


async def test_verify_refuses_an_empty_database_naming_both_versions(
    conn: asyncpg.Connection[Any],
) -> None:
    with pytest.raises(SchemaVersionMismatch) as refused:
        await verify(conn)
    message = str(refused.value)
    assert f"expected version {expected_version()}" in message
    assert "found 0" in message
    assert "threadwarden migrate" in message


async def test_verify_passes_after_migrating(migrated: asyncpg.Connection[Any]) -> None:
    assert await verify(migrated) == expected_version()


async def test_verify_refuses_a_newer_schema(migrated: asyncpg.Connection[Any]) -> None:
    newer = expected_version() + 1
    await migrated.execute(
        "INSERT INTO threadwarden.schema_migrations (version, name) VALUES ($1, 'future')", newer
    )
    with pytest.raises(SchemaVersionMismatch, match=f"found {newer}.*upgrade threadwarden"):
        await verify(migrated)


async def test_verify_refuses_a_migration_changed_after_it_was_applied(
    migrated: asyncpg.Connection[Any],
) -> None:
    await migrated.execute(
        "UPDATE threadwarden.schema_migrations SET name = 'an_older_draft' WHERE version = 2"
    )
    with pytest.raises(SchemaVersionMismatch, match="version 2 was applied as 'an_older_draft'"):
        await verify(migrated)


async def test_verify_refuses_a_recorded_checksum_that_differs_naming_the_migration(
    migrated: asyncpg.Connection[Any],
) -> None:
    await migrated.execute(
        "UPDATE threadwarden.schema_migrations SET checksum = repeat('0', 64) WHERE version = 3"
    )
    label = available_migrations()[2].label
    with pytest.raises(SchemaVersionMismatch) as refused:
        await verify(migrated)
    message = str(refused.value)
    assert f"migration {label} was applied with sha256 000000000000" in message
    assert "edited after it was applied" in message


async def test_verify_refuses_a_migration_file_edited_after_it_was_applied(
    conn: asyncpg.Connection[Any], own_migrations: Path
) -> None:
    await migrate(conn, available_migrations(own_migrations))
    assert await verify(conn, available_migrations(own_migrations)) == expected_version()
    [edited] = own_migrations.glob("0002_*.sql")
    edited.write_text(edited.read_text() + "\n-- a harmless-looking comment\n")

    with pytest.raises(SchemaVersionMismatch, match=f"migration {edited.stem} was applied with"):
        await verify(conn, available_migrations(own_migrations))
    assert await migrate(conn, available_migrations(own_migrations)) == []  # applies nothing


async def test_migrate_records_the_checksums_of_rows_applied_before_checksums(
    migrated: asyncpg.Connection[Any],
) -> None:
    await migrated.execute("UPDATE threadwarden.schema_migrations SET checksum = NULL")
    with pytest.raises(SchemaVersionMismatch, match="none recorded: run `threadwarden migrate`"):
        await verify(migrated)

    assert await migrate(migrated) == []

    assert await verify(migrated) == expected_version()
    assert [c for _, _, c in await _versions(migrated)] == [
        _sha256_of_shipped_file(m) for m in available_migrations()
    ]
