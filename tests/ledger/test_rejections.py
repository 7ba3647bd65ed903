"""The audit trail cannot be forged or flooded, and unknown senders cost no signature work."""

from __future__ import annotations

import os

from eth_account import Account
from fastapi.testclient import TestClient
from sqlalchemy import func
from sqlmodel import Session, select

from bench.harness.nodes import NodeKey, attestation, h
from ledger.core.models import Rejection
from ledger.rounds.retention import prune_rejections
from ledger.service import Ledger
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body


def _rejections(client: TestClient, node: str) -> list[dict]:
    r = client.get(f"/v1/nodes/{node}")
    assert r.status_code == 200, r.text
    return list(r.json()["rejections"])


def test_anonymous_posts_naming_a_node_do_not_grow_its_list(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey], domain: object
) -> None:
    victim = nodes[0]
    # two real refusals, signed by the node itself: a round beyond the window
    for rnd in (50, 51):
        att = attestation(victim, run_id=started_run, round_=rnd, base=GENESIS, result=h("x"))
        r = client.post("/v1/attestations", json=body(att, victim.key, domain))  # type: ignore[arg-type]
        assert r.json()["error"]["code"] == "future_round"
    real = _rejections(client, victim.address)
    assert [x["code"] for x in real] == ["future_round", "future_round"]

    forger = Account.from_key(os.urandom(32))
    items = []
    for i in range(500):
        att = attestation(victim, run_id=started_run, round_=1, base=GENESIS, result=h(f"f{i}"))
        forged = body(att, forger.key, domain)  # type: ignore[arg-type]
        if i % 2:
            forged["signature"] = "0x" + "11" * 65  # garbage
        items.append(forged)
    r = client.post("/v1/attestations/batch", json={"items": items})
    assert r.status_code == 202 and r.json()["rejected"] == 500, r.text
    codes = {x["error"]["code"] for x in r.json()["results"]}
    assert codes <= {"signer_mismatch", "bad_signature"}, codes
    assert _rejections(client, victim.address) == real
    with Session(ledger.engine) as s:
        assert s.exec(select(func.count()).select_from(Rejection)).one() == 2


def test_an_unknown_sender_is_refused_before_signature_work(
    client: TestClient, started_run: str, domain: object
) -> None:
    stranger = Account.from_key(os.urandom(32))
    key = NodeKey(key=stranger.key, address=stranger.address, payout="", operator="")
    att = attestation(key, run_id=started_run, round_=1, base=GENESIS, result=h("s"))
    forged = body(att, stranger.key, domain)  # type: ignore[arg-type]
    forged["signature"] = "0x" + "11" * 65  # a signature check would answer bad_signature
    r = client.post("/v1/attestations", json=forged)
    assert r.status_code == 403 and r.json()["error"]["code"] == "unregistered_node", r.text
    assert _rejections(client, stranger.address) == []


def test_retention_keeps_the_newest_refusals_per_node(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey], domain: object
) -> None:
    for node in nodes[:2]:
        for rnd in range(50, 55):
            att = attestation(node, run_id=started_run, round_=rnd, base=GENESIS, result=h("y"))
            client.post("/v1/attestations", json=body(att, node.key, domain))  # type: ignore[arg-type]
    before = _rejections(client, nodes[0].address)
    assert len(before) == 5
    assert prune_rejections(ledger.engine, keep=3) == 4
    assert _rejections(client, nodes[0].address) == before[:3]  # newest first
    assert len(_rejections(client, nodes[1].address)) == 3
