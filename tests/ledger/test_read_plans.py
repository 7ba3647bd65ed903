"""The polled reads cost the same however long a node's history: their statements read a
node's or a payout's newest rows from an index in id order (ix_attestation_node_id,
ix_attestation_payout_id; migration 0009), never every row of the node sorted.

Real databases, a history where the node's rows are the oldest (it stopped; 200 nodes worked
every round since): the statements must touch about ``limit`` rows, not the node's 500 (read
through an index of the node alone, then sorted) or the 20,000 after them (the primary key
walked backwards). Without the composite indexes they read all of the node's.

Not covered: in a network of very few nodes PostgreSQL may still walk the primary key backwards
(a node's share of the rows is large, so it expects its newest soon); for a node that stopped
long ago that reads the newer history. Its statistics decide, not these statements.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import Engine, insert
from sqlmodel import SQLModel

from ledger.api.routes import nodes, rewards
from ledger.core import db
from ledger.core.models import Attestation, RoundState, utcnow

RUN = "0x" + "a" * 64
NODE, PAYOUT = "0x" + "1" * 40, "0x" + "3" * 40
OTHERS = [f"0x{i:040x}" for i in range(1000, 1200)]  # 200 nodes worked every round since
MINE, THEIRS, LIMIT = 500, 20_000, 20


def _history(engine: Engine) -> None:
    SQLModel.metadata.create_all(engine)
    now = utcnow()

    def row(i: int, node: str) -> dict[str, Any]:
        h = f"0x{i:064x}"
        return dict(
            run_id=RUN, round=i, node=node, config_version=0, base_checkpoint=h,
            pseudo_gradient=h, data_shard=h, inner_steps=1, tokens=1, result_checkpoint=h,
            trace_root=h, digest=h, signature="0x" + "e" * 130,
            payout=PAYOUT if node == NODE else node,
            received_at=now,
        )  # fmt: skip

    rows = [row(i, NODE) for i in range(MINE)]
    rows += [row(MINE + i, OTHERS[i % len(OTHERS)]) for i in range(THEIRS)]
    rounds = [
        dict(run_id=RUN, round=i, state="open", opened_at=now, deadline_at=now)
        for i in range(MINE + THEIRS)
    ]
    with engine.begin() as conn:
        conn.execute(insert(Attestation.__table__), rows)  # type: ignore[attr-defined]
        conn.execute(insert(RoundState.__table__), rounds)  # type: ignore[attr-defined]


def _rows_read(plan: dict[str, Any]) -> int:
    """Rows every scan of the attestation table produced or filtered away."""
    own = 0
    if plan.get("Relation Name") == "attestation":
        loops = plan.get("Actual Loops", 1)
        own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * loops
    return own + sum(_rows_read(child) for child in plan.get("Plans", []))


STATEMENTS = {
    "a node's newest rounds": (nodes._ROUNDS.one.stmt, {"keys": NODE, "limit": LIMIT}),
    "a payout's newest receipts": (
        rewards._RECEIPTS.one.stmt,
        {"keys": NODE, "account": PAYOUT, "limit": LIMIT},
    ),
    "a node's rounds worked": (nodes._WORKED.one.stmt, {"keys": NODE}),
}


@pytest.mark.parametrize("name", list(STATEMENTS))
def test_postgres_reads_touch_limit_rows_not_the_history(postgres_url: str, name: str) -> None:
    engine = db.make_engine(postgres_url)
    try:
        _history(engine)
        stmt, params = STATEMENTS[name]
        compiled = stmt.compile(dialect=engine.dialect)
        bound = {**compiled.construct_params({}, _check=False), **params}
        with engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE")
            raw = conn.exec_driver_sql(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + compiled.string, bound
            ).scalar_one()
        plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
        read = _rows_read(plan)
        assert read <= 3 * LIMIT, (name, read, json.dumps(plan)[:3000])
    finally:
        engine.dispose()


@pytest.mark.parametrize("name", list(STATEMENTS))
def test_sqlite_reads_walk_an_index_in_order(sqlite_url: str, name: str) -> None:
    """SQLite's plan: a search of the node's (or payout's) index, no scan of the table and no
    sort of the node's rows (an SQLite index holds the rowid, the id, after its columns)."""
    engine = db.make_engine(sqlite_url)
    try:
        _history(engine)
        stmt, params = STATEMENTS[name]
        compiled = stmt.compile(dialect=engine.dialect)
        bound = compiled.construct_params({**params}, _check=False)
        positional = tuple(bound[key] for key in compiled.positiontup or ())
        with engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE")
            plan = [row[-1] for row in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN " + compiled.string, positional
            )]  # fmt: skip
        searches = [step for step in plan if "attestation" in step.lower() and "SCAN" in step]
        assert not searches, plan  # no full scan of attestation
        index = "ix_attestation_node_verified" if "worked" in name else "ix_attestation_node_id"
        assert any(index in step for step in plan), plan
        temp_sorts = [step for step in plan if "TEMP B-TREE FOR ORDER BY" in step]
        assert len(temp_sorts) <= (2 if "receipts" in name else 0), plan  # the union's 40 rows
    finally:
        engine.dispose()
