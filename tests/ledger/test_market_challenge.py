"""The timed hardware challenge through the real ledger (anvil deployment, SQLite): an honest
node passes and its measured values are recorded; a late commitment, a C that was never
computed, a forged projection, the wrong nonce, a foreign signature, a replayed or concurrent
request and an unregistered node are refused; a failed challenge becomes a fraud record."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from bench.harness.nodes import NodeKey
from coloco_cli.market.challenge import run_challenge
from ledger.intake import challenges
from ledger.service import Ledger
from protocol import challenge_auth
from protocol.eip712 import Eip712Domain
from protocol.signing import address_of_private_key
from reference import challenge as ch
from tests.ledger.test_market_api import body, make_offer

MEMORY = 4 << 20  # a 256 x 256 x 1024 product on CPU
SLOW = 10**6  # FLOP/s: a deadline of minutes


@pytest.fixture
def registered(ledger: Ledger, nodes: list[NodeKey]) -> list[NodeKey]:
    ledger.indexer.catch_up()
    return nodes


def _post(client: TestClient) -> Any:
    def post(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        r = client.post(path, json=body)
        return r.status_code, r.json()

    return post


def _issue(
    client: TestClient,
    node: NodeKey,
    domain: Eip712Domain,
    *,
    flops: int = SLOW,
    devices: int = 1,
    signer: bytes | None = None,
    request: bytes | None = None,
) -> Any:
    request = request or os.urandom(32)
    expires = int(time.time()) + 60
    claim = {"kind": "cpu", "devices": devices, "memory_bytes": MEMORY, "flops": flops}
    digest = challenge_auth.claim_digest(**claim, request=request, expires=expires)  # type: ignore[arg-type]
    sig = challenge_auth.sign(signer or node.key, domain, node.address, "issue", 0, 0, digest)
    body = {
        "node": node.address,
        "kind": "cpu",
        "devices": devices,
        "memoryBytes": MEMORY,
        "flops": flops,
        "request": "0x" + request.hex(),
        "expires": expires,
        "signature": sig,
    }
    return client.post("/v1/market/challenges", json=body)


def _commit(
    client: TestClient,
    node: NodeKey,
    domain: Eip712Domain,
    cid: int,
    root: bytes,
    signer: bytes | None = None,
    device: int = 0,
) -> Any:
    sig = challenge_auth.sign(signer or node.key, domain, node.address, "commit", cid, device, root)
    body = {"device": device, "root": "0x" + root.hex(), "signature": sig}
    return client.post(f"/v1/market/challenges/{cid}/commit", json=body)


def _open(
    client: TestClient,
    node: NodeKey,
    domain: Eip712Domain,
    cid: int,
    opening: ch.Opening,
    signer: bytes | None = None,
) -> Any:
    digest = opening.digest()
    sig = challenge_auth.sign(signer or node.key, domain, node.address, "open", cid, 0, digest)
    body = {"device": 0, "opening": opening.to_json(), "signature": sig}
    return client.post(f"/v1/market/challenges/{cid}/open", json=body)


def _prover(issued: dict[str, Any], nonce: bytes | None = None) -> ch.Prover:
    shape = ch.Shape(issued["n"], issued["m"])
    seed = bytes.fromhex(issued["seed"][2:])
    return ch.Prover(seed, nonce or bytes.fromhex(issued["nonces"][0][2:]), shape)


def _frauds(client: TestClient, node: NodeKey) -> list[Any]:
    rows = client.get("/v1/frauds", params={"node": node.address}).json()
    return [f for f in rows if f["run_id"] == challenges.MARKET_RUN_ID]


def test_an_honest_node_passes_on_every_device_and_its_measures_are_recorded(
    client: TestClient, ledger: Ledger, registered: list[NodeKey], domain: Eip712Domain
) -> None:
    node = registered[0]
    record = run_challenge(
        _post(client), node.key, domain, kind="cpu", devices=2, memory_bytes=MEMORY, flops=SLOW
    )
    assert record["verdict"] == "passed", record
    assert record["measured"]["devices"] == 2
    assert record["measured"]["memory_bytes"] == MEMORY
    assert record["measured"]["flops"] > 2 * SLOW  # two devices, each faster than it claimed
    assert [d["verdict"] for d in record["device_outcomes"]] == ["passed", "passed"]
    assert record["secret"] is not None  # decided: anyone can re-derive the probes
    assert _frauds(client, node) == []
    again = client.get(f"/v1/market/challenges/{record['challenge']}").json()
    assert again["verdict"] == "passed"
    # an offer naming this result matches when it carries no more than was measured
    result = bytes.fromhex(record["result"][2:])
    per_device = record["measured"]["flops"] // 2
    offer = {"node": node.address, "challenge": result, "device_count": 2}
    with ledger.engine.connect() as conn:
        assert challenges.matches_offer(conn, **offer, memory_bytes=MEMORY, flops=per_device)
        assert not challenges.matches_offer(
            conn, **offer, memory_bytes=MEMORY, flops=2 * per_device
        )
        assert not challenges.matches_offer(
            conn, **offer, memory_bytes=2 * MEMORY, flops=per_device
        )
        assert not challenges.matches_offer(
            conn, **{**offer, "device_count": 4}, memory_bytes=MEMORY, flops=per_device
        )
        other = {**offer, "node": registered[1].address}
        assert not challenges.matches_offer(conn, **other, memory_bytes=MEMORY, flops=1)
        assert not challenges.matches_offer(
            conn, **{**offer, "challenge": bytes(32)}, memory_bytes=MEMORY, flops=1
        )
    # ...and the ledger marks such an offer verified when the node posts it; one that carries more
    # than was measured is taken, unverified
    for nonce, flops, verified in ((1, per_device, True), (2, 2 * per_device, False)):
        signed = make_offer(node, device_count=2, memory_bytes=MEMORY, flops=flops,
                            challenge=result, nonce=nonce)  # fmt: skip
        posted = client.post("/v1/market/offers", json=body(node, signed, domain))
        assert posted.status_code == 202, posted.text
        assert posted.json()["verified"] is verified


def _late(client: TestClient, node: NodeKey, domain: Eip712Domain) -> dict[str, Any]:
    """One challenge claimed at a petaFLOP/s, committed after its deadline: its record."""
    issued = _issue(client, node, domain, flops=10**15).json()
    root = _prover(issued).run()
    time.sleep(max(0.0, issued["deadline_s"]) + 0.2)
    r = _commit(client, node, domain, issued["id"], root)
    assert r.status_code == 409 and r.json()["error"]["code"] == "challenge_late", r.text
    record: dict[str, Any] = client.get(f"/v1/market/challenges/{issued['id']}").json()
    assert record["verdict"] == "failed" and "late" in record["reason"]
    return record


def test_late_commitments_are_refused_and_a_majority_of_three_is_a_misclaim(
    client: TestClient,
    registered: list[NodeKey],
    domain: Eip712Domain,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One late run is refused but is not yet a misclaim (noise on a loaded machine: the node
    asks again); late in a majority of its last three decided challenges, it is (the fraud
    record of the third)."""
    monkeypatch.setattr(challenges, "LATENCY_S", 0.0)
    node = registered[0]
    first = _late(client, node, domain)
    assert "ask again" in first["reason"] and _frauds(client, node) == []
    _late(client, node, domain)
    assert _frauds(client, node) == []  # 2 of 2: not yet three
    third = _late(client, node, domain)
    (fraud,) = _frauds(client, node)
    assert fraud["round"] == third["challenge"] and fraud["evidence"]["verdict"] == "failed"


def test_one_late_run_among_passed_ones_is_not_a_misclaim(
    client: TestClient,
    registered: list[NodeKey],
    domain: Eip712Domain,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(challenges, "LATENCY_S", 0.0)
    node = registered[0]
    for _ in range(2):
        issued = _issue(client, node, domain).json()  # the default claim: a deadline of hours
        prover = _prover(issued)
        key = bytes.fromhex(
            _commit(client, node, domain, issued["id"], prover.run()).json()["probe"][2:]
        )
        assert _open(client, node, domain, issued["id"], prover.open(key)).json()["verdict"] == (
            "passed"
        )
    late = _late(client, node, domain)
    assert "minority" in late["reason"] and _frauds(client, node) == []


def test_a_node_that_never_commits_fails_at_its_deadline(
    client: TestClient,
    registered: list[NodeKey],
    domain: Eip712Domain,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(challenges, "LATENCY_S", 0.0)
    node = registered[1]
    for n in range(1, 4):
        issued = _issue(client, node, domain, flops=10**15).json()
        time.sleep(issued["deadline_s"] + 0.1)
        record = client.get(f"/v1/market/challenges/{issued['id']}").json()
        assert record["verdict"] == "failed" and "no commitment" in record["reason"]
        assert len(_frauds(client, node)) == (n == 3)  # a majority of three: a misclaim


def _committed_garbage(issued: dict[str, Any]) -> tuple[ch.Prover, bytes]:
    """A prover that never computed C: random integer rows, a real Merkle tree over them."""
    prover = _prover(issued)
    n = issued["n"]
    import torch

    prover._c = torch.from_numpy(
        np.random.default_rng(1).integers(-50, 50, size=(n, n)).astype(np.float32)
    )
    leaves = [ch.leaf(row.tobytes()) for row in prover._c.numpy()]
    prover._levels = ch.tree(leaves)
    return prover, prover._levels[-1][0]


def test_a_product_never_computed_is_refused(
    client: TestClient, registered: list[NodeKey], domain: Eip712Domain
) -> None:
    node = registered[0]
    issued = _issue(client, node, domain).json()
    prover, root = _committed_garbage(issued)
    key = bytes.fromhex(_commit(client, node, domain, issued["id"], root).json()["probe"][2:])
    r = _open(client, node, domain, issued["id"], prover.open(key))
    assert r.status_code == 200, r.text
    assert r.json()["verdict"] == "failed" and "is not that row of A @ B" in r.json()["reason"]
    assert len(_frauds(client, node)) == 1


def test_rows_computed_once_the_probe_is_known_do_not_open_the_commitment(
    client: TestClient, registered: list[NodeKey], domain: Eip712Domain
) -> None:
    """The forger commits garbage in time, then computes only the probed rows (cheap): they are
    the true rows, but not the committed ones."""
    node = registered[0]
    issued = _issue(client, node, domain).json()
    prover, root = _committed_garbage(issued)
    key = bytes.fromhex(_commit(client, node, domain, issued["id"], root).json()["probe"][2:])
    garbage = prover.open(key)
    honest = _prover(issued)
    honest.run()
    true_rows = honest.open(key).rows
    forged = ch.Opening(true_rows, garbage.proofs)
    r = _open(client, node, domain, issued["id"], forged)
    assert r.json()["verdict"] == "failed" and "does not lead" in r.json()["reason"]


def test_the_product_of_another_nonce_is_refused(
    client: TestClient, registered: list[NodeKey], domain: Eip712Domain
) -> None:
    node = registered[0]
    issued = _issue(client, node, domain).json()
    prover = _prover(issued, nonce=os.urandom(32))  # precomputed, or another device's
    root = prover.run()
    key = bytes.fromhex(_commit(client, node, domain, issued["id"], root).json()["probe"][2:])
    r = _open(client, node, domain, issued["id"], prover.open(key))
    assert r.json()["verdict"] == "failed" and "wrong product" in r.json()["reason"]


def test_every_step_must_be_signed_by_the_node(
    client: TestClient, registered: list[NodeKey], domain: Eip712Domain
) -> None:
    node, other = registered[0], registered[1]
    r = _issue(client, node, domain, signer=other.key)
    assert r.status_code in (403, 422) and r.json()["error"]["code"] == "bad_signature", r.text
    issued = _issue(client, node, domain).json()
    prover = _prover(issued)
    root = prover.run()
    r = _commit(client, node, domain, issued["id"], root, signer=other.key)
    assert r.json()["error"]["code"] == "bad_signature", r.text
    key = bytes.fromhex(_commit(client, node, domain, issued["id"], root).json()["probe"][2:])
    r = _open(client, node, domain, issued["id"], prover.open(key), signer=other.key)
    assert r.json()["error"]["code"] == "bad_signature", r.text
    r = _open(client, node, domain, issued["id"], prover.open(key))
    assert r.json()["verdict"] == "passed"


def test_one_open_challenge_per_node_and_none_for_a_stranger(
    client: TestClient, registered: list[NodeKey], domain: Eip712Domain
) -> None:
    node = registered[2]
    assert _issue(client, node, domain).status_code == 201
    r = _issue(client, node, domain)
    assert r.status_code == 409 and r.json()["error"]["code"] == "challenge_open"
    key = os.urandom(32)
    stranger = NodeKey(key, address_of_private_key(key), "", "")
    r = _issue(client, stranger, domain)
    assert r.status_code == 403 and r.json()["error"]["code"] == "unregistered_node"


def test_a_replayed_request_is_refused(
    client: TestClient, registered: list[NodeKey], domain: Eip712Domain
) -> None:
    node = registered[1]
    request, expires = os.urandom(32), int(time.time()) + 60
    claim = {"kind": "cpu", "devices": 1, "memory_bytes": MEMORY, "flops": SLOW}
    digest = challenge_auth.claim_digest(**claim, request=request, expires=expires)  # type: ignore[arg-type]
    sig = challenge_auth.sign(node.key, domain, node.address, "issue", 0, 0, digest)
    body = {
        "node": node.address,
        "kind": "cpu",
        "devices": 1,
        "memoryBytes": MEMORY,
        "flops": SLOW,
        "request": "0x" + request.hex(),
        "expires": expires,
        "signature": sig,
    }
    first = client.post("/v1/market/challenges", json=body)
    assert first.status_code == 201, first.text
    issued = first.json()
    prover = _prover(issued)
    root = prover.run()
    key = bytes.fromhex(_commit(client, node, domain, issued["id"], root).json()["probe"][2:])
    assert _open(client, node, domain, issued["id"], prover.open(key)).json()["verdict"] == "passed"
    r = client.post("/v1/market/challenges", json=body)  # the same signed claim again
    assert r.status_code == 409 and r.json()["error"]["code"] == "challenge_replayed", r.text


def test_the_command_proves_a_claim_against_a_served_ledger(
    client: TestClient, ledger: Ledger, registered: list[NodeKey], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from typer.testing import CliRunner

    from coloco_cli.app import app
    from tests.ledger.conftest import serving

    node = registered[0]
    with serving(ledger) as url:
        args = ["market", "challenge", "--memory", "4MiB", "--flops", str(SLOW)]
        args += ["--ledger-url", url, "--node-key", "0x" + node.key.hex(), "--json"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        record = json.loads(result.output)
        assert record["verdict"] == "passed" and record["node"] == node.address
        # a claim it cannot meet: exit 1, the reason named
        monkeypatch.setattr(challenges, "LATENCY_S", 0.0)
        args[5] = str(10**16)
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1 and "late" in result.output, result.output
