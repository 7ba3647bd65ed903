"""RawSelect (ledger/api/raw.py) gives the rows ``Connection.execute`` gives, on SQLite and a
real PostgreSQL: datetimes in UTC (SQLite stores text, a New York PostgreSQL session answers in
its zone), booleans (SQLite stores integers), floats, NULLs, limits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, bindparam, insert
from sqlalchemy import select as sa_select
from sqlalchemy.exc import DBAPIError
from sqlmodel import SQLModel

from ledger.api.raw import Keyed, RawSelect
from ledger.core import db
from ledger.core.models import Attestation

ATT = Attestation.__table__  # type: ignore[attr-defined]
MISSING = Table("no_such_table", MetaData(), Column("id", Integer))
NODES = ["0x" + "1" * 40, "0x" + "2" * 40]
WHEN = datetime(2026, 12, 1, 13, 20, 30, 123456, tzinfo=UTC)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_rows_match_sqlalchemy(kind: str, request: pytest.FixtureRequest) -> None:
    url: str = request.getfixturevalue(f"{kind}_url")
    engine = db.make_engine(url)
    try:
        SQLModel.metadata.create_all(engine)
        rows = []
        for i in range(6):
            h = f"0x{i:064x}"
            rows.append(dict(
                run_id=h, round=i, node=NODES[i % 2], config_version=0, base_checkpoint=h,
                pseudo_gradient=h, data_shard=h, inner_steps=1, tokens=2**62 + i,
                result_checkpoint=h, trace_root=h, digest=h, signature="0x",
                received_at=WHEN + timedelta(i),
                verified=[None, True, False][i % 3], quality=[None, 0.25, 1e-9][i % 3],
            ))  # fmt: skip
        with engine.begin() as conn:
            conn.execute(insert(ATT), rows)
        stmt = (
            sa_select(ATT.c.id, ATT.c.node, ATT.c.tokens, ATT.c.received_at, ATT.c.verified,
                      ATT.c.quality, ATT.c.reason)
            .where(ATT.c.node == bindparam("node"))
            .order_by(ATT.c.id.desc())
            .limit(bindparam("limit"))
        )  # fmt: skip
        raw = RawSelect(stmt)
        with engine.connect() as conn:
            if kind == "postgres":
                conn.exec_driver_sql("SET TIME ZONE 'America/New_York'")
            for node in NODES:
                expected = [tuple(r) for r in conn.execute(stmt, {"node": node, "limit": 2})]
                got = raw.rows(conn, {"node": node, "limit": 2})
                assert got == expected and len(got) == 2
                assert all(r[3].utcoffset() == timedelta(0) for r in got)  # UTC, as stored
            assert raw.names(conn) == ("id", "node", "tokens", "received_at", "verified",
                                       "quality", "reason")  # fmt: skip
            keyed = Keyed(ATT.c.node, lambda keys: sa_select(ATT.c.id).where(keys))
            assert {r[0] for r in keyed.rows(conn, NODES, {})} == set(range(1, 7))
            assert {r[0] for r in keyed.rows(conn, NODES[:1], {})} == {1, 3, 5}
            with pytest.raises(DBAPIError):  # a driver error, as SQLAlchemy raises it
                RawSelect(sa_select(MISSING.c.id)).rows(conn)
    finally:
        engine.dispose()


def test_an_in_list_is_refused() -> None:
    """An expanding parameter's SQL is rendered at execution: RawSelect cannot run it."""
    stmt = sa_select(ATT.c.id).where(ATT.c.node.in_(["a", "b"]))
    with pytest.raises(ValueError, match="IN list"):
        engine = db.make_engine("sqlite://")
        with engine.connect() as conn:
            RawSelect(stmt).rows(conn)
