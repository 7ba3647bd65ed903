"""Alembic migrations build exactly the models' schema, up and down, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlmodel import SQLModel

from ledger.core import (
    db,
)


def _check(url: str) -> None:
    db.upgrade(url)
    engine = db.make_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    types = [d for d in diff if isinstance(d, list) and d and d[0][0] == "modify_type"]
    structural = [d for d in diff if d not in types]
    assert structural == [], structural
    if engine.dialect.name == "postgresql":  # times are timestamptz, as the models say
        times = {"received_at", "created_at", "opened_at", "deadline_at", "closed_at"}
        zones = [d for d in types if d[0][3] in times]
        assert zones == [], zones
    tables = set(inspect(engine).get_table_names())
    assert {"attestation", "rejection", "ledger_round", "settlement", "node"} <= tables
    engine.dispose()
    db.downgrade(url)
    engine = db.make_engine(url)
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    engine.dispose()
    db.upgrade(url)  # and up again


def test_migrations_sqlite(sqlite_url: str) -> None:
    _check(sqlite_url)


@pytest.mark.postgres
def test_migrations_postgres(postgres_url: str) -> None:
    _check(postgres_url)
