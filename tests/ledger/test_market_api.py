"""The compute market's endpoints on a real ledger (anvil deployment, SQLite, real signatures):
POST /v1/market/offers' refusals (each guard seen red when removed), GET's filters and pages,
POST /v1/market/requests' ranking and reasons, and the threat model's bounds (docs/ledger.md)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from bench.harness.nodes import NodeKey, new_node
from ledger.core.models import MarketOffer
from ledger.market.offers import MAX_TTL_S
from ledger.service import Ledger
from protocol.deployment import Deployment
from protocol.devnet import AnvilProcess
from protocol.eip712 import Eip712Domain
from protocol.offer import ComputeOffer, label_bytes32
from protocol.signing import sign_digest

GIB = 2**30
ZERO = bytes(32)


def make_offer(node: NodeKey, **fields: Any) -> ComputeOffer:
    values: dict[str, Any] = {
        "node": node.address,
        "device_kind": label_bytes32("nvidia-h200"),
        "device_count": 1,
        "memory_bytes": 80 * GIB,
        "flops": 50 * 10**12,
        "bandwidth": 10**9,
        "region": label_bytes32("eu-west"),
        "price_per_device_hour": 10**15,
        "min_hours": 1,
        "expiry": int(time.time()) + 3600,
        "nonce": 1,
        "challenge": ZERO,
    }
    values.update(fields)
    return ComputeOffer(**values)


def body(node: NodeKey, offer: ComputeOffer, domain: Eip712Domain, key: bytes | None = None) -> Any:
    sig = sign_digest(offer.digest(domain), key or node.key)
    return {"offer": offer.to_json(), "signature": "0x" + sig.hex()}


@pytest.fixture
def market(client: TestClient, ledger: Ledger, nodes: list[NodeKey]) -> TestClient:
    """The client, once the indexer saw the three staked nodes."""
    ledger.indexer.catch_up()
    return client


def post(client: TestClient, data: Any) -> Any:
    return client.post("/v1/market/offers", json=data)


def test_offer_accepted_listed_and_replaced(
    market: TestClient, nodes: list[NodeKey], domain: Eip712Domain, ledger: Ledger
) -> None:
    node = nodes[0]
    first = make_offer(node)
    r = post(market, body(node, first, domain))
    assert r.status_code == 202, r.text
    assert r.json()["verified"] is False and r.json()["replaced"] is False
    again = post(market, body(node, first, domain))  # idempotent
    assert again.status_code == 202 and again.json()["id"] == r.json()["id"]
    listed = market.get("/v1/market/offers").json()["offers"]
    assert [(o["node"], o["device_kind"], o["region"]) for o in listed] == [
        (node.address, "nvidia-h200", "eu-west")
    ]
    assert int(listed[0]["cost_per_pflops_hour"]) == 10**15 * 10**15 // (50 * 10**12)
    newer = first.replace(nonce=2, price_per_device_hour=2 * 10**15)
    r2 = post(market, body(node, newer, domain))
    assert r2.status_code == 202 and r2.json()["replaced"] is True
    listed = market.get("/v1/market/offers").json()["offers"]
    assert [int(o["price_per_device_hour"]) for o in listed] == [2 * 10**15]
    # the replaced offer is a replay now: refused, not restored
    old = post(market, body(node, first, domain))
    assert old.status_code == 409 and old.json()["error"]["code"] == "stale_nonce"
    assert "nonce 3" in old.json()["error"]["message"]


def test_a_wallet_signs_the_typed_data_the_ledger_serves(
    market: TestClient, nodes: list[NodeKey]
) -> None:
    """GET /v1/market/eip712 plus an offer's message is eth_signTypedData_v4 JSON: eth-account
    signs it as a wallet would, and the ledger takes that signature."""
    from eth_account import Account
    from eth_account.messages import encode_typed_data

    schema = market.get("/v1/market/eip712").json()
    assert schema["primaryType"] == "ComputeOffer"
    offer = make_offer(nodes[0], price_per_device_hour=2**60)  # beyond 2^53: a decimal string
    typed = {**schema, "message": offer.to_json()}
    assert typed["message"]["pricePerDeviceHour"] == str(2**60)
    signed = Account.sign_message(encode_typed_data(full_message=typed), nodes[0].key)
    r = post(market, {"offer": typed["message"], "signature": "0x" + bytes(signed.signature).hex()})
    assert r.status_code == 202, r.text


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"expiry": 1}, 422, "expired_offer"),
        ({"expiry": "far"}, 422, "expiry_too_far"),
        ({"device_count": 0}, 422, "invalid_field"),
        ({"flops": 2**63}, 422, "invalid_field"),
        ({"region": b"\xff" * 32}, 422, "invalid_field"),
    ],
)
def test_offer_field_refusals(
    market: TestClient,
    nodes: list[NodeKey],
    domain: Eip712Domain,
    change: dict[str, Any],
    status: int,
    code: str,
) -> None:
    if change.get("expiry") == "far":
        change = {"expiry": int(time.time()) + MAX_TTL_S + 60}
    r = post(market, body(nodes[0], make_offer(nodes[0], **change), domain))
    assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text


def test_signature_refusals(market: TestClient, nodes: list[NodeKey], domain: Eip712Domain) -> None:
    node = nodes[0]
    offer = make_offer(node)
    other = post(market, body(node, offer, domain, key=nodes[1].key))
    assert (other.status_code, other.json()["error"]["code"]) == (403, "signer_mismatch")
    wrong_domain = Eip712Domain(chain_id=1, verifying_contract=domain.verifying_contract)
    r = post(market, body(node, offer, wrong_domain))
    assert (r.status_code, r.json()["error"]["code"]) == (403, "signer_mismatch")
    r = post(market, {"offer": offer.to_json(), "signature": "0x1234"})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "bad_signature")
    # a field changed after signing recovers to another address
    data = body(node, offer, domain)
    data["offer"]["pricePerDeviceHour"] = 1
    r = post(market, data)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "signer_mismatch")
    assert market.get("/v1/market/offers").json()["offers"] == []


def test_unregistered_and_unstaked_refused_before_any_signature_work(
    market: TestClient,
    ledger: Ledger,
    chain: AnvilProcess,
    deployment: Deployment,
    domain: Eip712Domain,
) -> None:
    """Threat model: an anonymous flood costs a dictionary lookup (a garbage signature from an
    unregistered address is answered `unregistered_node`, never `bad_signature`)."""
    stranger = NodeKey(key=b"\x07" * 32, address="", payout="", operator="")
    from eth_account import Account

    stranger = NodeKey(stranger.key, Account.from_key(stranger.key).address, "", "")
    r = post(market, {"offer": make_offer(stranger).to_json(), "signature": "0x00"})
    assert (r.status_code, r.json()["error"]["code"]) == (403, "unregistered_node")
    unstaked = new_node(chain.w3, deployment, chain.accounts[5][0], stake=0, seed=b"\x08" * 32)
    ledger.indexer.catch_up()
    r = post(market, {"offer": make_offer(unstaked).to_json(), "signature": "0x00"})
    assert (r.status_code, r.json()["error"]["code"]) == (403, "not_staked")


def test_one_row_per_node_whatever_it_posts(
    market: TestClient, nodes: list[NodeKey], domain: Eip712Domain, ledger: Ledger
) -> None:
    """Threat model: a staked node posting without end holds one row (its latest offer)."""
    node = nodes[0]
    for nonce in range(1, 8):
        r = post(market, body(node, make_offer(node, nonce=nonce * 10), domain))
        assert r.status_code == 202, r.text
    with ledger.engine.connect() as conn:
        from sqlalchemy import func, select

        assert conn.execute(select(func.count()).select_from(MarketOffer)).scalar_one() == 1


def test_list_filters_and_pages(
    market: TestClient, nodes: list[NodeKey], domain: Eip712Domain
) -> None:
    kinds = ["nvidia-h200", "nvidia-a100", "cpu"]
    for node, kind in zip(nodes, kinds, strict=True):
        offer = make_offer(node, device_kind=label_bytes32(kind), memory_bytes=kinds.index(kind))
        assert post(market, body(node, offer, domain)).status_code == 202
    page = market.get("/v1/market/offers", params={"limit": 2}).json()
    assert len(page["offers"]) == 2 and page["next_before"] is not None
    rest = market.get("/v1/market/offers", params={"limit": 2, "before": page["next_before"]})
    assert len(rest.json()["offers"]) == 1 and rest.json()["next_before"] is None
    ids = [o["id"] for o in page["offers"] + rest.json()["offers"]]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 3
    only = market.get("/v1/market/offers", params={"device_kind": "cpu"}).json()["offers"]
    assert [o["node"] for o in only] == [nodes[2].address]
    big = market.get("/v1/market/offers", params={"min_memory": 1}).json()["offers"]
    assert {o["node"] for o in big} == {nodes[1].address, nodes[2].address}
    mine = market.get("/v1/market/offers", params={"node": nodes[1].address.lower()}).json()
    assert [o["node"] for o in mine["offers"]] == [nodes[1].address]
    op = market.get("/v1/market/offers", params={"operator": nodes[0].operator}).json()
    assert [o["node"] for o in op["offers"]] == [nodes[0].address]
    assert market.get("/v1/market/offers", params={"limit": 1001}).status_code == 422


def test_request_ranks_and_gives_every_reason(
    market: TestClient, nodes: list[NodeKey], domain: Eip712Domain
) -> None:
    prices = [3 * 10**15, 10**15, 2 * 10**15]
    for node, price in zip(nodes, prices, strict=True):
        offer = make_offer(node, price_per_device_hour=price)
        assert post(market, body(node, offer, domain)).status_code == 202
    need = {"devices": 2, "memory_bytes": 40 * GIB, "hours": 2, "budget": str(10**18)}
    r = market.post("/v1/market/requests", json={**need, "bandwidth": {"bit_per_s": 10**8}})
    assert r.status_code == 200, r.text
    out = r.json()
    assert [c["node"] for c in out["chosen"]] == [nodes[1].address, nodes[2].address]
    assert [(n["node"], n["code"]) for n in out["not_chosen"]] == [(nodes[0].address, "not_needed")]
    assert out["filled"] and out["cost_wei"] == (10**15 + 2 * 10**15) * 2
    # the bandwidth need derived from the run: 1 GB packets, 2 members, 60 s rounds
    run = {"packet_bytes": 10**9, "round_seconds": 60}
    derived = market.post("/v1/market/requests", json={**need, "bandwidth": run}).json()
    assert derived["request"]["min_bandwidth"] == 8 * 10**9 * 10 // 60 + 1
    assert {n["code"] for n in derived["not_chosen"]} == {"bandwidth"}
    assert not derived["filled"] and "2 devices needed, 0 chosen" in derived["shortfall"]
    missing = market.post("/v1/market/requests", json=need)
    assert missing.status_code == 422 and "bandwidth" in missing.json()["error"]["message"]
    half = market.post("/v1/market/requests", json={**need, "bandwidth": {"packet_bytes": 1}})
    assert half.status_code == 422 and "round_seconds" in half.json()["error"]["message"]


def test_request_bounds(market: TestClient) -> None:
    """Threat model: the largest request the schema admits is answered, not overflowed; one
    past it is refused."""
    huge = {
        "devices": 2**20 - 1,
        "memory_bytes": str(2**63 - 1),
        "hours": 2**17 - 1,
        "budget": str(2**256 - 1),
        "bandwidth": {"bit_per_s": str(2**63 - 1)},
        "max_providers": 2**20 - 1,
    }
    r = market.post("/v1/market/requests", json=huge)
    assert r.status_code == 200 and r.json()["filled"] is False
    derived = {"packet_bytes": str(2**63 - 1), "round_seconds": 1, "group": 2**20 - 1}
    r = market.post("/v1/market/requests", json={**huge, "bandwidth": derived})
    assert r.status_code == 200 and int(r.json()["request"]["min_bandwidth"]) > 2**63
    for field, value in [("devices", 2**20), ("hours", 0), ("budget", str(2**256))]:
        bad = market.post("/v1/market/requests", json={**huge, field: value})
        assert bad.status_code == 422, (field, bad.text)


def test_requests_see_new_offers_and_stakes_at_once(
    market: TestClient,
    nodes: list[NodeKey],
    domain: Eip712Domain,
    ledger: Ledger,
    chain: AnvilProcess,
    deployment: Deployment,
) -> None:
    """The columns a request ranks are read again when an offer is added or the chain view
    changes (ledger.market.offers.BookCache): a new offer is ranked by the next request, a node
    that unstaked below the minimum gets `not_staked` at the next one."""
    from bench.harness.nodes import contract, send

    need = {"devices": 1, "memory_bytes": 0, "hours": 1, "budget": str(10**18)}
    need["bandwidth"] = {"bit_per_s": 0}

    def ranked() -> dict[str, str]:
        out = market.post("/v1/market/requests", json=need).json()
        codes = {c["node"]: "chosen" for c in out["chosen"]}
        return codes | {n["node"]: n["code"] for n in out["not_chosen"]}

    assert post(market, body(nodes[0], make_offer(nodes[0]), domain)).status_code == 202
    assert ranked() == {nodes[0].address: "chosen"}
    cheaper = make_offer(nodes[1], price_per_device_hour=1)
    assert post(market, body(nodes[1], cheaper, domain)).status_code == 202
    assert ranked() == {nodes[1].address: "chosen", nodes[0].address: "not_needed"}
    stake = contract(chain.w3, deployment, "StakeManager")
    send(chain.w3, stake.functions.requestUnstake(nodes[1].address, 2 * 10**18), nodes[1].operator)
    chain.call("evm_mine", [])  # the indexer reads confirmed blocks
    ledger.indexer.catch_up()
    assert not ledger.indexer.snapshot.is_active(nodes[1].address)
    assert ranked() == {nodes[0].address: "chosen", nodes[1].address: "not_staked"}
