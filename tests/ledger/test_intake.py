"""POST /v1/attestations against the real chain: acceptance, idempotency, every level-0 refusal."""

from __future__ import annotations

import json

import pytest
from eth_account import Account
from fastapi.testclient import TestClient
from sqlmodel import Session, func, select

from bench.harness.nodes import NodeKey, attestation, h, new_node
from ledger.core.models import Attestation, Rejection
from ledger.service import Ledger
from protocol.signing import SECP256K1_N
from tests.ledger.conftest import GENESIS
from tests.ledger.helpers import body


def _count(ledger: Ledger, model: type) -> int:
    with Session(ledger.engine) as s:
        return int(s.exec(select(func.count()).select_from(model)).one())


def _post(client: TestClient, payload: object) -> tuple[int, dict]:  # type: ignore[type-arg]
    r = client.post("/v1/attestations", json=payload)
    return r.status_code, r.json()


@pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_accepts_and_is_idempotent(client, ledger, started_run, nodes, domain) -> None:
    att = attestation(nodes[0], run_id=started_run, round_=1, base=GENESIS, result=h("r1"))
    status, out = _post(client, body(att, nodes[0].key, domain))
    assert status == 202, out
    assert out["status"] == "accepted" and isinstance(out["id"], int)
    status2, out2 = _post(client, body(att, nodes[0].key, domain))
    assert (status2, out2["id"]) == (202, out["id"])
    assert _count(ledger, Attestation) == 1
    # same node, same round, different fields: a conflicting duplicate
    other = att.replace(tokens=att.tokens + 1)
    status3, out3 = _post(client, body(other, nodes[0].key, domain))
    assert status3 == 409 and out3["error"]["code"] == "conflicting_attestation"
    assert _count(ledger, Attestation) == 1
    rnd = client.get(f"/v1/runs/{started_run}/rounds/1").json()
    assert rnd["state"] == "open" and rnd["members"] == [nodes[0].address]


def test_signature_refusals(client, ledger, started_run, nodes, domain) -> None:
    att = attestation(nodes[0], run_id=started_run, round_=1, base=GENESIS, result=h("r1"))
    good = body(att, nodes[0].key, domain)
    sig = bytes.fromhex(good["signature"][2:])
    r_, s_, v_ = sig[:32], int.from_bytes(sig[32:64], "big"), sig[64]
    malleable = r_ + (SECP256K1_N - s_).to_bytes(32, "big") + bytes([55 - v_])
    cases = {
        "bad_signature": [
            {**good, "signature": "0x" + malleable.hex()},
            {**good, "signature": good["signature"][:-2]},
            {**good, "signature": "0x" + "zz" * 65},
            {**good, "signature": "0x" + sig[:64].hex() + "01"},
        ],
        "signer_mismatch": [
            body(att, nodes[1].key, domain),  # someone else's key
            {**good, "attestation": {**good["attestation"], "tokens": 999_999}},
        ],
    }
    for code, payloads in cases.items():
        for payload in payloads:
            status, out = _post(client, payload)
            assert out["error"]["code"] == code, (payload, out)
            assert status in (403, 422)
    assert _count(ledger, Attestation) == 0
    # none of these proves the node sent it: nothing is recorded under its address
    assert client.get(f"/v1/nodes/{nodes[0].address}").json()["rejections"] == []


def test_wrong_chain_and_contract(client, started_run, nodes, domain, deployment) -> None:
    from protocol.eip712 import Eip712Domain

    att = attestation(nodes[0], run_id=started_run, round_=1, base=GENESIS, result=h("r1"))
    other_chain = Eip712Domain(chain_id=1, verifying_contract=domain.verifying_contract)
    payload = body(att, nodes[0].key, other_chain)
    status, out = _post(client, payload)
    assert status == 403 and out["error"]["code"] == "signer_mismatch"
    assert "chain id" in out["error"]["message"]
    payload["domain"] = {"chainId": 1, "verifyingContract": domain.verifying_contract}
    status, out = _post(client, payload)
    assert status == 422 and out["error"]["code"] == "wrong_chain"
    other = deployment.address("StakeManager")
    payload = body(
        att, nodes[0].key, Eip712Domain(chain_id=domain.chain_id, verifying_contract=other)
    )
    payload["domain"] = {"chainId": domain.chain_id, "verifyingContract": other}
    status, out = _post(client, payload)
    assert status == 422 and out["error"]["code"] == "wrong_contract"


def test_chain_state_refusals(client, ledger, chain, deployment, started_run, nodes, domain):
    unstaked = new_node(chain.w3, deployment, chain.accounts[5][0], stake=0)
    stranger_key = b"\x07" * 32
    stranger = NodeKey(stranger_key, Account.from_key(stranger_key).address, "", "")
    ledger.indexer.catch_up()

    def post(node: NodeKey, **kw: object) -> tuple[int, str]:
        fields = {"run_id": started_run, "round_": 1, "base": GENESIS, "result": h("r")}
        fields.update(kw)
        status, out = _post(client, body(attestation(node, **fields), node.key, domain))
        return status, out["error"]["code"] if status != 202 else "accepted"

    assert post(unstaked) == (403, "not_staked")
    assert post(stranger) == (403, "unregistered_node")
    assert post(nodes[0], run_id=h("no-such-run")) == (404, "unknown_run")
    assert post(nodes[0], round_=0)[1] == "invalid_field"
    assert post(nodes[0], round_=4) == (422, "future_round")  # the window: rounds 1..3
    assert post(nodes[0], config_version=2) == (422, "future_config_version")
    assert post(nodes[0], round_=2) == (202, "accepted")
    # recorded: the refusals of verified senders (unknown run, future round and config)
    assert _count(ledger, Rejection) == 3
    assert ledger.indexer.snapshot.last_round[started_run] == 0


@pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_form_refusals(client, ledger, started_run, nodes, domain) -> None:
    att = attestation(nodes[0], run_id=started_run, round_=1, base=GENESIS, result=h("r1"))
    good = body(att, nodes[0].key, domain)
    fields = good["attestation"]
    bad_payloads = [
        {**good, "extra": 1},
        {**good, "attestation": {**fields, "surprise": True}},
        {**good, "attestation": {**fields, "round": True}},
        {**good, "attestation": {**fields, "round": "01"}},  # decimal strings: canonical only
        {**good, "attestation": {**fields, "round": "0x1"}},
        {**good, "attestation": {**fields, "tokens": " 1000"}},
        {**good, "attestation": {**fields, "tokens": str(2**64)}},
        {**good, "attestation": {**fields, "round": 1.5}},  # 1.0 is JSON Schema's integer 1
        {**good, "attestation": {**fields, "round": 2**53}},  # above 2^53 - 1: its string
        {**good, "attestation": {**fields, "innerSteps": -5}},
        {**good, "attestation": {**fields, "innerSteps": 0}},  # a replay divides by it
        {**good, "attestation": {**fields, "round": str(2**63)}},  # beyond the database's
        {**good, "attestation": {**fields, "tokens": -1}},
        {**good, "attestation": {**fields, "tokens": 2**64}},
        {**good, "attestation": {**fields, "innerSteps": 2**32}},
        {**good, "attestation": {**fields, "node": fields["node"].lower()}},
        {**good, "attestation": {**fields, "runId": fields["runId"][:-2]}},
        {"attestation": fields},
        [],
        {**good, "round_members": ["0x1234"]},
    ]
    for payload in bad_payloads:
        status, out = _post(client, payload)
        assert status == 422, (payload, out)
        assert out["error"]["code"] == "invalid_field" and out["error"]["message"]
    for raw in (b"{", b'{"attestation": NaN}', b"\xff\xfe", b'{"a": Infinity}'):
        r = client.post(
            "/v1/attestations", content=raw, headers={"content-type": "application/json"}
        )
        assert r.status_code in (400, 422), raw
        assert r.json()["error"]["code"] in ("malformed_json", "invalid_field")
    nan = json.dumps(good).replace('"tokens": 1000', '"tokens": NaN').encode()
    r = client.post("/v1/attestations", content=nan, headers={"content-type": "application/json"})
    assert r.status_code in (400, 422) and "error" in r.json()
    huge = b'{"x": "' + b"a" * (2 << 20) + b'"}'
    r = client.post("/v1/attestations", content=huge, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    assert _count(ledger, Attestation) == 0
    assert client.get("/v1/health").json()["database"] == "ok"
    status, out = _post(client, good)  # and the service keeps serving
    assert status == 202


@pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_batch(client, ledger, started_run, nodes, domain) -> None:
    items = [
        body(
            attestation(n, run_id=started_run, round_=1, base=GENESIS, result=h("r1")),
            n.key,
            domain,
        )
        for n in nodes
    ]
    items.append(items[0])  # an exact duplicate inside the batch: same id
    bad = attestation(nodes[0], run_id=started_run, round_=2, base=GENESIS, result=h("r1"))
    items.append(body(bad, nodes[1].key, domain))  # signer mismatch
    r = client.post("/v1/attestations/batch", json={"items": items})
    assert r.status_code == 202, r.text
    out = r.json()
    assert (out["accepted"], out["rejected"]) == (4, 1)
    assert out["results"][3]["id"] == out["results"][0]["id"]
    assert out["results"][4]["error"]["code"] == "signer_mismatch"
    assert _count(ledger, Attestation) == 3
    r = client.post("/v1/attestations/batch", json={"items": []})
    assert r.status_code == 422


@pytest.mark.parametrize(
    "db_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_large_batch_ids_match_items(settings_for, db_url, run_id, nodes, domain) -> None:
    """A batch in one group insert: every id maps to its own item; re-sent, the same ids; a
    conflicting item among new and re-sent ones is refused alone."""
    from fastapi.testclient import TestClient as Client

    from ledger.main import create_app
    from tests.ledger.conftest import ADMIN

    service = Ledger(settings_for(db_url, round_window=10))
    with Client(create_app(ledger=service)) as client:
        r = client.post("/v1/runs", json={"run_id": run_id, "genesis_checkpoint": GENESIS},
                        headers={"Authorization": f"Bearer {ADMIN}"})  # fmt: skip
        assert r.status_code == 201, r.text
        service.indexer.catch_up()
        atts = [
            attestation(n, run_id=run_id, round_=rnd, base=GENESIS, result=h("r"), tokens=rnd)
            for rnd in range(1, 8)
            for n in nodes
        ]
        items = [body(a, n.key, domain) for a, n in zip(atts, nodes * 7, strict=True)]
        out = client.post("/v1/attestations/batch", json={"items": items}).json()
        assert out["accepted"] == 21, out
        ids = [res["id"] for res in out["results"]]
        with Session(service.engine) as s:
            rows = {row.id: row for row in s.exec(select(Attestation)).all()}
        for att, row_id in zip(atts, ids, strict=True):
            assert rows[row_id].node == att.node and rows[row_id].round == att.round
        again = client.post("/v1/attestations/batch", json={"items": items}).json()
        assert [res["id"] for res in again["results"]] == ids  # idempotent, same ids
        # a taken slot re-sent with other fields beside an exact re-post and a new one: the
        # conflict is refused and recorded under its (verified) node, the others answered
        changed = attestation(nodes[0], run_id=run_id, round_=1, base=GENESIS, result=h("x"))
        fresh = attestation(nodes[0], run_id=run_id, round_=9, base=GENESIS, result=h("r"))
        mixed = [body(changed, nodes[0].key, domain), items[1], body(fresh, nodes[0].key, domain)]
        out = client.post("/v1/attestations/batch", json={"items": mixed}).json()
        results = out["results"]
        assert results[0]["error"]["code"] == "conflicting_attestation", results
        assert results[1]["id"] == ids[1] and results[2]["status"] == "accepted"
        trail = client.get(f"/v1/nodes/{nodes[0].address}").json()["rejections"]
        assert [r["code"] for r in trail] == ["conflicting_attestation"]
    service.stop()
