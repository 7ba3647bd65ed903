"""Boundaries served on demand, end to end with the real ledger app and real signed uploads: the
ledger asks a node for one state of the trace it signed, refuses a state that is not the committed
leaf, takes the node's answer (trainer.round.boundaries.answer_requests), and fails a node that
does not deliver by the deadline (ledger.judge.boundaries)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import torch
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from bench.harness.nodes import NodeKey, attestation, h
from ledger.core.models import SKETCH_REQUEST, Attestation, BoundaryRequest, utcnow
from ledger.intake import boundaries as intake
from ledger.judge.boundaries import CHECK, check_boundaries
from ledger.judge.entries import Entry
from ledger.service import Ledger
from protocol.blob_auth import UploadSigner
from protocol.eip712 import Eip712Domain
from reference.inner import InnerConfig, InnerTrainer
from reference.model import GPT, GPTConfig
from reference.trace import TraceBuilder
from tests.ledger.conftest import ADMIN, GENESIS
from tests.ledger.helpers import body, upload_headers
from trainer.network.ledger_client import LedgerClient, RetryPolicy
from trainer.round.boundaries import BoundaryStore, answer_requests

SMALL = GPTConfig(n_layer=1, n_head=2, d_model=16, seq_len=8)
AUTH = {"Authorization": f"Bearer {ADMIN}"}


def _trained_round(store: BoundaryStore, r: int) -> bytes:
    """A node's round 1: 4 inner steps, boundaries every 2 (0, 2, 4) kept in ``store``."""
    model = GPT(SMALL, seed=5)
    inner = InnerTrainer(model, InnerConfig(steps=4, lr=3e-3, batch_size=2))
    builder = TraceBuilder(model, dict(model.named_parameters()),
                           optimizer=lambda: inner._opt, keep=store.keeper(r))  # fmt: skip
    rows = torch.randint(0, 256, (8, SMALL.seq_len + 1), generator=torch.Generator().manual_seed(1))
    inner.train(rows, on_boundary=builder, trace_interval=2)
    store.finish(r, builder.trace())
    return bytes(builder.trace().root)


def _attest(client: TestClient, node: NodeKey, run: str, domain: Eip712Domain, root: bytes) -> None:
    att = attestation(node, run_id=run, round_=1, base=GENESIS, result=h("r1"),
                      trace_root="0x" + root.hex())  # fmt: skip
    r = client.post("/v1/attestations", json=body(att, node.key, domain))
    assert r.status_code == 202, r.text


def _ask(client: TestClient, run: str, node: NodeKey, boundary: int, deadline_s: float) -> dict:  # type: ignore[type-arg]
    r = client.post("/v1/boundaries/requests", headers=AUTH, json={
        "run_id": run, "round": 1, "node": node.address, "boundary": boundary,
        "deadline_s": deadline_s,
    })  # fmt: skip
    assert r.status_code == 201, r.text
    return dict(r.json())


def test_a_requested_boundary_is_checked_against_the_signed_root(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey],
    domain: Eip712Domain, tmp_path: Path,
) -> None:  # fmt: skip
    node = nodes[0]
    store = BoundaryStore(tmp_path / "node")
    root = _trained_round(store, 1)
    _attest(client, node, started_run, domain, root)
    # only the admin (the audit) asks
    anon = client.post("/v1/boundaries/requests", json={
        "run_id": started_run, "round": 1, "node": node.address, "boundary": 1, "deadline_s": 60,
    })  # fmt: skip
    assert anon.status_code == 401
    asked = _ask(client, started_run, node, 1, 60)
    assert asked["state"] == "pending" and asked["trace_root"] == "0x" + root.hex()
    listed = client.get("/v1/boundaries/requests", params={"node": node.address}).json()
    assert [(r["round"], r["boundary"]) for r in listed] == [(1, 1)]

    # a state that is not boundary 1 (boundary 2's, uploaded with a real signature) is refused
    other = store.serve(1, 2)
    right = store.serve(1, 1)
    state_hash = "0x" + other.boundary.state_hash.hex()
    put = client.put(f"/v1/blobs/{state_hash}", content=other.blob,
                     headers=upload_headers(node, domain, state_hash))  # fmt: skip
    assert put.status_code == 201, put.text
    wrong = client.post("/v1/boundaries/deliveries", json={
        "run_id": started_run, "round": 1, "node": node.address, "boundary": 1,
        "step": right.boundary.step, "state_hash": state_hash,
        "sketch_hash": "0x" + right.boundary.sketch_hash.hex(),
        "proof": ["0x" + p.hex() for p in right.proof],
    })  # fmt: skip
    assert wrong.status_code == 422, wrong.text
    assert wrong.json()["error"]["code"] == "boundary_mismatch"
    assert "does not lead to the committed traceRoot" in wrong.json()["error"]["message"]
    # a state never uploaded is named as missing
    missing = client.post("/v1/boundaries/deliveries", json={
        "run_id": started_run, "round": 1, "node": node.address, "boundary": 1, "step": 2,
        "state_hash": h("nothing"), "sketch_hash": h("s"), "proof": [],
    })  # fmt: skip
    assert missing.status_code == 404 and "upload the boundary state first" in missing.text

    # the node's own answer: a signed upload of the kept state, then the delivery
    lc = LedgerClient("http://testserver", http=client, retry=RetryPolicy(attempts=1),
                      uploader=UploadSigner(node.key, domain))  # fmt: skip
    assert answer_requests(store, lc, bytes.fromhex(started_run[2:]), node.address) == 1
    assert client.get("/v1/boundaries/requests", params={"node": node.address}).json() == []
    with Session(ledger.engine) as s:
        row = s.exec(select(BoundaryRequest)).one()
    assert row.state == "delivered" and row.step == 2
    assert row.state_hash == "0x" + right.boundary.state_hash.hex()
    assert ledger.blobs.exists(row.state_hash)


def test_a_node_that_does_not_deliver_by_the_deadline_fails_the_audit(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey],
    domain: Eip712Domain, tmp_path: Path,
) -> None:  # fmt: skip
    silent, prompt = nodes[0], nodes[1]
    for n in (silent, prompt):
        root = _trained_round(BoundaryStore(tmp_path / n.address), 1)
        _attest(client, n, started_run, domain, root)
    _ask(client, started_run, silent, 0, 30)
    _ask(client, started_run, prompt, 0, 30)
    lc = LedgerClient("http://testserver", http=client, retry=RetryPolicy(attempts=1),
                      uploader=UploadSigner(prompt.key, domain))  # fmt: skip
    answer_requests(BoundaryStore(tmp_path / prompt.address), lc,
                    bytes.fromhex(started_run[2:]), prompt.address)  # fmt: skip
    later = utcnow() + timedelta(seconds=31)
    with Session(ledger.engine) as s:
        before = list(s.exec(select(BoundaryRequest)).all())
        entries = [Entry(a) for a in s.exec(select(Attestation)).all()]
        check_boundaries(entries, before, utcnow())  # not due yet: nobody fails
        assert all(e.ok for e in entries)
        check_boundaries(entries, before, later)
        failed = {e.att.node: e.check for e in entries}
        assert failed == {silent.address: CHECK, prompt.address: None}
        assert "not delivered by its deadline" in next(e.reason for e in entries if not e.ok)
        missed = intake.expire(s, now=later)
        assert [(m.node, m.state) for m in missed] == [(silent.address, "missed")]
    # and a delivery after the deadline is refused
    store = BoundaryStore(tmp_path / silent.address)
    served = store.serve(1, 0)
    state_hash = "0x" + served.boundary.state_hash.hex()
    client.put(f"/v1/blobs/{state_hash}", content=served.blob,
               headers=upload_headers(silent, domain, state_hash))  # fmt: skip
    late = client.post("/v1/boundaries/deliveries", json={
        "run_id": started_run, "round": 1, "node": silent.address, "boundary": 0, "step": 0,
        "state_hash": state_hash, "sketch_hash": "0x" + served.boundary.sketch_hash.hex(),
        "proof": ["0x" + p.hex() for p in served.proof],
    })  # fmt: skip
    assert late.status_code == 409 and late.json()["error"]["code"] == "boundary_late"


def test_a_requested_sketch_is_served_and_one_not_of_its_leaf_is_refused(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey],
    domain: Eip712Domain, tmp_path: Path,
) -> None:  # fmt: skip
    """An audit asks for a segment end's sketch (a few KiB), not its state: the node uploads the
    sketch under its hash; a sketch that is not the leaf's is refused at delivery."""
    node = nodes[0]
    store = BoundaryStore(tmp_path / "node")
    root = _trained_round(store, 1)
    _attest(client, node, started_run, domain, root)
    r = client.post("/v1/boundaries/requests", headers=AUTH, json={
        "run_id": started_run, "round": 1, "node": node.address, "boundary": 1,
        "deadline_s": 60, "sketch": True,
    })  # fmt: skip
    assert r.status_code == 201, r.text
    assert r.json()["sketch"] is True and r.json()["at_step"] == SKETCH_REQUEST
    both = client.post("/v1/boundaries/requests", headers=AUTH, json={
        "run_id": started_run, "round": 1, "node": node.address, "boundary": 1,
        "deadline_s": 60, "sketch": True, "at_step": 3,
    })  # fmt: skip
    assert both.status_code == 422 and "not both" in both.text

    right, other = store.serve_sketch(1, 1), store.serve_sketch(1, 2)
    assert len(right.blob) < 30_000 < len(store.serve(1, 1).blob)

    def deliver(blob: bytes, name: bytes, state: bytes) -> dict:  # type: ignore[type-arg]
        hex_ = "0x" + name.hex()
        put = client.put(f"/v1/blobs/{hex_}", content=blob,
                         headers=upload_headers(node, domain, hex_))  # fmt: skip
        assert put.status_code in (200, 201), put.text
        answer = client.post("/v1/boundaries/deliveries", json={
            "run_id": started_run, "round": 1, "node": node.address, "boundary": 1,
            "step": right.boundary.step, "state_hash": "0x" + state.hex(),
            "sketch_hash": hex_, "proof": ["0x" + p.hex() for p in right.proof], "sketch": True,
        })  # fmt: skip
        return {"status": answer.status_code, **answer.json()}

    # boundary 2's sketch, delivered for boundary 1 with boundary 1's state hash: not the leaf
    wrong = deliver(other.blob, other.boundary.sketch_hash, right.boundary.state_hash)
    assert wrong["status"] == 422 and wrong["error"]["code"] == "boundary_mismatch"
    assert "is not the leaf the proof leads to" in wrong["error"]["message"]
    # a state is not a sketch
    state = store.serve(1, 1)
    not_sketch = deliver(state.blob, state.boundary.state_hash, right.boundary.state_hash)
    assert not_sketch["status"] == 422 and "sketch refused: a sketch holds" in str(not_sketch)

    lc = LedgerClient("http://testserver", http=client, retry=RetryPolicy(attempts=1),
                      uploader=UploadSigner(node.key, domain))  # fmt: skip
    assert answer_requests(store, lc, bytes.fromhex(started_run[2:]), node.address) == 1
    with Session(ledger.engine) as s:
        row = s.exec(select(BoundaryRequest)).one()
    assert row.state == "delivered" and row.at_step == SKETCH_REQUEST and row.step == 2
    assert row.sketch_hash == "0x" + right.boundary.sketch_hash.hex()
    assert row.state_hash == "0x" + right.boundary.state_hash.hex()
    assert ledger.blobs.exists(row.sketch_hash)


def test_a_rounds_segment_audits_are_served_in_public_without_the_seed_while_it_is_judged(
    client: TestClient, ledger: Ledger, started_run: str, nodes: list[NodeKey],
    domain: Eip712Domain, tmp_path: Path,
) -> None:  # fmt: skip
    """``GET /v1/runs/{run}/rounds/{round}/segment-audits`` (ledger.api.routes.audits): no token,
    each requested boundary with its committed step and hashes once delivered; the round's seed
    is not served while the round is open (it would name the drawn nodes before the audit);
    the listing is bounded and an unknown round answers 404."""
    node = nodes[0]
    store = BoundaryStore(tmp_path / "node")
    _attest(client, node, started_run, domain, _trained_round(store, 1))
    url = f"/v1/runs/{started_run}/rounds/1/segment-audits"
    assert client.get(url).json() == []  # nothing asked yet
    _ask(client, started_run, node, 2, 60)
    (pending,) = client.get(url).json()
    assert pending["node"] == node.address and pending["ledger_verdict"] == "pending", pending
    asked = {"boundary": 2, "full": True, "state": "pending", "step": None, "state_hash": None,
             "sketch_hash": None}  # fmt: skip
    assert pending["boundaries"] == [asked], pending
    lc = LedgerClient("http://testserver", http=client, retry=RetryPolicy(attempts=1),
                      uploader=UploadSigner(node.key, domain))  # fmt: skip
    assert answer_requests(store, lc, bytes.fromhex(started_run[2:]), node.address) == 1
    (served,) = client.get(url, params={"node": node.address.lower()}).json()
    (b,) = served["boundaries"]
    kept = store.serve(1, 2).boundary
    assert (b["state"], b["step"]) == ("delivered", kept.step), b
    assert b["state_hash"] == "0x" + kept.state_hash.hex(), b
    assert b["sketch_hash"] == "0x" + kept.sketch_hash.hex(), b
    assert served["audit_seed"] is None and served["segments"] == [], served  # round not judged
    assert served["origin_state_hash"] is None and served["excused"] == {}, served
    assert client.get(url, params={"node": "0x" + "11" * 20}).json() == []
    assert client.get(url, params={"limit": 1001}).status_code == 422
    missing = client.get(f"/v1/runs/{started_run}/rounds/99/segment-audits")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
