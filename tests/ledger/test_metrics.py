"""Operators' view: Prometheus /metrics and a request id on every log line."""

from __future__ import annotations

import logging
import os

import pytest
from eth_account import Account
from fastapi.testclient import TestClient

from bench.harness.nodes import NodeKey, attestation, h
from ledger.service import Ledger
from tests.ledger.conftest import ADMIN, GENESIS
from tests.ledger.helpers import body


def _sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_metrics_count_intake_and_show_the_lifecycle(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey], domain: object
) -> None:
    att = attestation(nodes[0], run_id=started_run, round_=1, base=GENESIS, result=h("m"))
    assert client.post("/v1/attestations", json=body(att, nodes[0].key, domain)).status_code == 202  # type: ignore[arg-type]
    stranger = Account.from_key(os.urandom(32))
    key = NodeKey(key=stranger.key, address=stranger.address, payout="", operator="")
    bad = attestation(key, run_id=started_run, round_=1, base=GENESIS, result=h("m"))
    assert client.post("/v1/attestations", json=body(bad, key.key, domain)).status_code == 403  # type: ignore[arg-type]
    ledger.tick()
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert _sample(text, "coloco_ledger_attestations_accepted_total") == 1
    assert 'coloco_ledger_attestations_rejected_total{code="unregistered_node"} 1.0' in text
    assert _sample(text, "coloco_ledger_write_queue_depth") == 0
    assert _sample(text, "coloco_ledger_indexer_lag_blocks") >= 0
    assert _sample(text, "coloco_ledger_pending_transactions") == 0
    assert _sample(text, "coloco_ledger_settlement_lag_seconds") == 0
    assert _sample(text, "coloco_ledger_leader") == 1
    assert "coloco_ledger_round_scoring_seconds_count" in text


def test_every_log_line_of_a_request_carries_its_id(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    r = client.post(
        "/v1/runs",
        json={"run_id": h("run-rid"), "genesis_checkpoint": GENESIS},
        headers={"Authorization": f"Bearer {ADMIN}", "X-Request-ID": "req-0123abc"},
    )
    assert r.status_code == 201 and r.headers["x-request-id"] == "req-0123abc"
    mine = [rec for rec in caplog.records if getattr(rec, "request_id", None) == "req-0123abc"]
    assert any("settlement intent" in rec.getMessage() for rec in mine), caplog.text
    fresh = client.get("/v1/health/live", headers={"X-Request-ID": "bad id\n"})
    assert fresh.headers["x-request-id"] != "bad id\n" and len(fresh.headers["x-request-id"]) == 32
    assert all(hasattr(rec, "request_id") for rec in caplog.records)
