"""Closing rounds costs what changed, not what is open: the keeper's pass over many open rounds
without new attestations runs a fixed number of statements; on PostgreSQL another worker's
attestation that completes a round is still seen on the next pass."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event

from bench.harness.nodes import NodeKey, attestation, h
from ledger.core.config import Settings
from ledger.core.models import utcnow
from ledger.core.schemas import AttestationIn
from ledger.main import create_app
from ledger.service import Ledger
from tests.ledger.conftest import ADMIN, GENESIS
from tests.ledger.helpers import body, join


@contextmanager
def counting(engine: Engine) -> Iterator[list[str]]:
    statements: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", before)


@pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_a_pass_over_forty_quiet_open_rounds_runs_a_few_statements(
    settings_for: Callable[..., Settings],
    db_url: str,
    run_id: str,
    nodes: list[NodeKey],
    domain: object,
) -> None:
    """40 open rounds, each with one attestation, none new since the last pass: the pass reads
    the open rounds (and, on PostgreSQL, the rounds written since its mark) and nothing per
    round. (Every open round cost two queries per pass, every 0.5 s, on PostgreSQL.)"""
    ledger = Ledger(settings_for(db_url, round_window=100))
    try:
        with TestClient(create_app(ledger=ledger)) as client:
            r = client.post(
                "/v1/runs",
                json={"run_id": run_id, "genesis_checkpoint": GENESIS},
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            assert r.status_code == 201, r.text
            ledger.indexer.catch_up()
            for rnd in range(1, 41):
                node = nodes[rnd % 3]
                att = attestation(node, run_id=run_id, round_=rnd, base=GENESIS, result=h("r"))
                r = client.post("/v1/attestations", json=body(att, node.key, domain))  # type: ignore[arg-type]
                assert r.status_code == 202, r.text
            with counting(ledger.engine) as first:  # the first pass looks at every open round
                ledger.keeper.close_due()
            with counting(ledger.engine) as statements:
                assert ledger.keeper.close_due() == []
            ledger.keeper._scanned_at = float("-inf")  # PostgreSQL's periodic full look
            with counting(ledger.engine) as full:
                assert ledger.keeper.close_due() == []
    finally:
        ledger.stop()
    assert len(statements) <= 3, statements
    assert len(full) <= 3, full
    # nobody joined these rounds, so none can close before its deadline: one query for the
    # joins of all 40, none for their attestations (81 before, then 41: one per round's joins)
    attestation_reads = [s for s in first if "FROM attestation" in s and "max(" not in s]
    join_reads = [s for s in first if "round_join" in s]
    assert len(attestation_reads) <= 1 and len(join_reads) == 1 and len(first) <= 6, first


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_another_workers_attestation_completes_a_round_at_the_next_pass(
    client: TestClient,
    ledger: Ledger,
    settings_for: Callable[..., Settings],
    db_url: str,
    started_run: str,
    nodes: list[NodeKey],
    domain: object,
) -> None:
    a, b, _ = nodes
    for node in (a, b):
        assert join(client, node, started_run, 1, domain).status_code == 202  # type: ignore[arg-type]
    time.sleep(ledger.settings.join_window_s + 0.1)
    members = [a.address, b.address]

    def item(node: NodeKey) -> AttestationIn:
        att = attestation(node, run_id=started_run, round_=1, base=GENESIS, result=h("r"))
        return AttestationIn.model_validate(body(att, node.key, domain, members))  # type: ignore[arg-type]

    assert ledger.intake.submit([item(a)])[0].status == 202
    later = utcnow() + timedelta(seconds=2)
    assert ledger.keeper.close_due(now=later) == []  # the full first pass: a alone
    other = Ledger(settings_for(db_url))  # a second worker on the same database
    try:
        other.indexer.catch_up()
        assert other.intake.submit([item(b)])[0].status == 202
    finally:
        other.stop()
    assert ledger.keeper.close_due(now=later) == [(started_run, 1)]


@pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_a_batch_over_ten_new_rounds_reads_their_joins_in_one_query(
    settings_for: Callable[..., Settings],
    db_url: str,
    run_id: str,
    nodes: list[NodeKey],
    domain: object,
) -> None:
    """Intake checks each attestation's membership: the joins of the rounds a group opens are
    read in one query on the group's own connection (one query per round, each on a second
    pooled connection, took half the writer's time when every group opened rounds)."""
    ledger = Ledger(settings_for(db_url, round_window=100))
    try:
        with TestClient(create_app(ledger=ledger)) as client:
            r = client.post(
                "/v1/runs",
                json={"run_id": run_id, "genesis_checkpoint": GENESIS},
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            assert r.status_code == 201, r.text
            ledger.indexer.catch_up()
            items = []
            for rnd in range(1, 11):
                for node in nodes[:2]:
                    att = attestation(node, run_id=run_id, round_=rnd, base=GENESIS, result=h("r"))
                    items.append(body(att, node.key, domain))  # type: ignore[arg-type]
            with counting(ledger.engine) as statements:
                r = client.post("/v1/attestations/batch", json={"items": items})
            assert r.status_code == 202 and r.json()["accepted"] == 20, r.text
    finally:
        ledger.stop()
    joins = [s for s in statements if "round_join" in s]
    assert len(joins) == 1, joins
